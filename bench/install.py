"""Cold-install time: `make setup` of this checkout into a fresh folder, as a new machine would run it.

The tracked files of HEAD are copied into a temporary folder (``git archive``) and ``make setup`` runs
there with an empty uv cache, pip's cache off and no built llama.cpp wheel (``--cache cold``, the default:
a fresh machine), or with the user's caches (``--cache warm``: a second clone on the same machine, CI).
Debian packages are whatever the machine has (``make setup`` installs the missing ones; their time is in the total).

The peer, measured in the same run with ``--peer``, is the same install with pip instead of uv
(``make setup INSTALLER=pip``, also cold): the ratio says what the installer buys.

Prints one JSON line: ``cold_minutes`` (wall clock of ``make setup``), the phases the setup recorded
(``<venv>/.setup-times.json``: installer, requirements, package, llama_build overlapping them), and
with ``--peer`` ``pip_minutes`` and ``speedup``.

    python bench/install.py                 # ~6-8 min on 2 cores
    python bench/install.py --peer          # + the pip install (~20 min)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def checkout(dest: Path) -> None:
    """The tracked files of HEAD in ``dest`` (what a clone holds)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)


def timed_setup(work: Path, installer: str, cache: str) -> dict:
    """Run ``make setup`` in a fresh checkout under ``work``; its wall clock and recorded phases."""
    src = work / f"src-{installer}"
    src.mkdir()
    checkout(src)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIRTUAL_ENV")}
    if cache == "cold":  # no uv cache, no pip cache, no built llama.cpp wheel: a fresh machine
        env["UV_CACHE_DIR"] = str(work / f"uv-cache-{installer}")
        env["XDG_CACHE_HOME"] = str(work / f"xdg-cache-{installer}")
        env["PIP_NO_CACHE_DIR"] = "1"
    log = work / f"setup-{installer}.log"
    t0 = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.run(
            ["make", "setup", f"INSTALLER={installer}"], cwd=src, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    minutes = (time.monotonic() - t0) / 60
    if proc.returncode != 0:
        tail = log.read_text().splitlines()[-5:]
        print(f"error: make setup ({installer}) failed with {proc.returncode}: {' | '.join(tail)}", file=sys.stderr)
        sys.exit(1)
    times_file = src / ".venv" / ".setup-times.json"
    phases = json.loads(times_file.read_text())["seconds"] if times_file.is_file() else {}
    return {"minutes": round(minutes, 2), "phases_s": phases}


def main() -> int:
    """Run the measurement; print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", choices=("cold", "warm"), default="cold")
    parser.add_argument("--peer", action="store_true", help="also time the pip install (INSTALLER=pip)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (logs, venvs)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="embodied_ws-install-"))
    try:
        uv = timed_setup(work, "uv", args.cache)
        load = os.getloadavg()[0]
        result = {
            "bench": "install",
            "cache": args.cache,
            "cpus": os.cpu_count(),
            "cold_minutes" if args.cache == "cold" else "warm_minutes": uv["minutes"],
            "phases_s": uv["phases_s"],
            "target_minutes": 8,
            "load_avg_1min_at_end": round(load, 2),  # other work on the machine slows the compile
        }
        if args.peer:
            pip = timed_setup(work, "pip", args.cache)
            result.update(pip_minutes=pip["minutes"], pip_phases_s=pip["phases_s"])
            result["speedup"] = round(pip["minutes"] / uv["minutes"], 2)
        print(json.dumps(result))
    finally:
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
