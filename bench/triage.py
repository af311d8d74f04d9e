"""Log triage speed: a generated 100 MB mixed robotics log through `embodied-ws doctor`, vs grep -E.

Prints one JSON object: the doctor's wall time and peak RSS (a fresh process, start-up included),
its lines/s, and the lines/s of ``grep -E -c`` over the same rule patterns on the same file.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from embodied_ws.assistant.rules import builtin_rules

BENIGN = [
    "[INFO] [{t}] [mujoco_sim_node]: step {i} published /joint_states (3 joints)",
    "[policy_node-1] [INFO] [{t}] [policy_node]: control loop 25.0 Hz, latency p50 1.2 ms",
    "Starting >>> pkg_{i}",
    "Finished <<< pkg_{i} [3.21s]",
    "| rollout/ep_rew_mean | {i}.5 |",
    "-- Found ament_cmake: 2.5.2 (/opt/ros/jazzy/share/ament_cmake/cmake)",
    "[gazebo-1] [Msg] Serving world controls on [/world/empty/control]",
    '  File "/home/lab/ws/src/pkg/module_{i}.py", line {i}, in run',
    "train ━━━━━━━━━━━━━ {i}/2,000,000 steps succ 87% | eval 90%",
]
ERRORS = [
    "RuntimeError: CUDA out of memory. Tried to allocate 512.00 MiB",
    "[WARN] [{t}] [camera]: New subscription discovered on topic '/points', requesting incompatible QoS.",
    "Lookup would require extrapolation into the future.  Requested time {t}",
    "AttributeError: _ARRAY_API not found",
]


def make_log(path: Path, megabytes: int, seed: int = 0) -> int:
    """Write a ~``megabytes`` MB log (one error line per ~20k lines); returns its line count."""
    rng = random.Random(seed)
    target = megabytes * 1_000_000
    lines = size = 0
    with open(path, "w") as f:
        while size < target:
            block = []
            for _ in range(10_000):
                t = f"{1700000000 + lines * 0.001:.6f}"
                pool = ERRORS if rng.random() < 5e-5 else BENIGN
                block.append(rng.choice(pool).format(t=t, i=lines))
                lines += 1
            text = "\n".join(block) + "\n"
            f.write(text)
            size += len(text)
    return lines


def grep_patterns() -> list[str]:
    """The rule patterns in POSIX ERE (GNU grep knows \\w and \\s, not \\d)."""
    out = []
    for r in builtin_rules().rules:
        out += [p.replace("\\d", "[0-9]") for p in r.patterns] + [c.regex.replace("\\d", "[0-9]") for c in r.context]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "big.log"
        lines = make_log(log, args.mb)
        log_mb = log.stat().st_size / 1e6
        t = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "embodied_ws.cli", "doctor", str(log), "--json"],
            capture_output=True,
            text=True,
            check=True,
        )
        seconds = time.perf_counter() - t
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        found = {f["id"]: f["count"] for f in json.loads(proc.stdout)["findings"]}
        pats = Path(tmp) / "patterns.txt"
        pats.write_text("\n".join(grep_patterns()) + "\n")
        t = time.perf_counter()
        g = subprocess.run(
            ["grep", "-E", "-c", "-f", str(pats), str(log)],
            capture_output=True,
            text=True,
            env={**os.environ, "LC_ALL": "C"},
        )
        grep_seconds = time.perf_counter() - t
    print(
        json.dumps(
            {
                "log_mb": round(log_mb, 1),
                "lines": lines,
                "seconds": round(seconds, 3),
                "peak_rss_mb": round(peak_mb, 1),
                "lines_per_s": round(lines / seconds),
                "grep_seconds": round(grep_seconds, 3),
                "grep_lines_per_s": round(lines / grep_seconds),
                "grep_matching_lines": int(g.stdout.strip() or 0),
                "findings": found,
                "vs_grep": round((lines / seconds) / (lines / grep_seconds), 3),
            }
        )
    )


if __name__ == "__main__":
    main()
