"""Your own robot: ``embodied-ws train`` with the DEFAULT preset on a public arm description vs arm3 (one JSON).

Each robot trains with ``--config reach`` (the preset ``make train`` uses), nothing tuned per robot, in
its own ``embodied-ws train`` process, under a wall-clock budget (``--max-minutes``, default 15): at the
budget the trainer gets SIGINT, which ends learning, runs the final evaluation (256 episodes, full DR)
and writes the report. A run that early-stops (two evaluations ≥ 95 %, confirmed at 93 % on 1,024 fresh
episodes) ends sooner.

Default robot: the Franka Panda URDF shipped in the ``example-robot-data`` wheel (7 arm joints, 2 finger
joints one of which is a mimic joint, COLLADA visuals, STL collision meshes, ``package://`` paths). Public MJCF
arms (MuJoCo Menagerie, meshes removed): ``--robot tests/fixtures/robots/menagerie/panda.xml`` (or iiwa14, gen3,
xarm7, ur5e, sawyer, lite6). The preset's own budget (``train.max_minutes: 14``) ends learning first.
Printed: ``robot``, ``dof``, ``action_mode`` (``auto`` resolved), ``episode_steps`` (the length the preset
chose), ``steps``, ``minutes``, ``final_success``, ``peak_rss_mb`` (the trainer's peak RSS, 32 training envs +
evaluation), ``env_steps_per_s``, and the same under ``arm3``; ratios compare the two runs measured on the
same machine in the same invocation.

    python bench/own_robot.py [--robot PATH] [--robot-arg NAME:=VALUE] [--package-path DIR] [--max-minutes 15]
                              [--runs DIR]
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def default_robot() -> str:
    """The Panda URDF inside the installed ``example-robot-data`` wheel (cmeel prefix in site-packages)."""
    share = Path(sysconfig.get_paths()["purelib"]) / "cmeel.prefix" / "share" / "example-robot-data"
    path = share / "robots" / "panda_description" / "urdf" / "panda.urdf"
    if not path.is_file():
        sys.exit(f"error: {path}: not found (pip install example-robot-data, or pass --robot PATH)")
    return str(path)


def run(robot: str, extra: list[str], runs: Path, name: str, max_minutes: float, sets: list[str]) -> dict:
    """Train one robot with the default preset; returns the bench fields."""
    cmd = [sys.executable, "-m", "embodied_ws.cli", "train", "--config", "reach", "--robot", robot]
    cmd += [*extra, "--name", name, "--runs", str(runs), "--json"]
    cmd += [a for s in sets for a in ("--set", s)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=max_minutes * 60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # ends learning; the trainer still evaluates and reports
        out, err = proc.communicate()
    if proc.returncode != 0:
        sys.exit(f"error: training {robot} failed: {err.strip().splitlines()[-1] if err.strip() else proc.returncode}")
    summary = json.loads((runs / name / "summary.json").read_text())
    t = summary["time"]
    return {
        "robot": summary["robot"],
        "dof": _dof(runs / name),
        "action_mode": _action_mode(runs / name),
        "steps": summary["steps"],
        "minutes": round(t["total_s"] / 60.0, 2),
        "wall_minutes": round((time.perf_counter() - t0) / 60.0, 2),
        "final_success": summary["final_success"],
        "peak_rss_mb": summary["hardware"]["peak_rss_mb"],
        "env_steps_per_s": round(t["env_steps_per_s"], 1),
        "interrupted": bool(summary["interrupted"]),
        "episode_steps": _episode_steps(runs / name),
    }


def _episode_steps(run_dir: Path) -> int:
    import yaml

    return int(yaml.safe_load((run_dir / "config.yaml").read_text())["env"]["episode_steps"])


def _dof(run_dir: Path) -> int:
    """The robot's actuators (an ``ee_delta`` policy's action is a Cartesian step: its size is not the arm's)."""
    meta = json.loads((run_dir / "policy" / "policy.json").read_text())
    return len(meta["action"]["actuators"])


def _action_mode(run_dir: Path) -> str:
    return str(json.loads((run_dir / "policy" / "policy.json").read_text())["action"]["mode"])


def main() -> None:
    """Parse arguments, train the robot and arm3, print one JSON object."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--robot", help="URDF/xacro/MJCF path (default: example-robot-data's Panda URDF)")
    ap.add_argument("--robot-arg", action="append", default=[], help="xacro argument NAME:=VALUE")
    ap.add_argument("--package-path", action="append", default=[], help="folder holding ROS packages")
    ap.add_argument("--max-minutes", type=float, default=15.0, help="wall-clock budget per robot (default 15)")
    ap.add_argument("--set", action="append", default=[], help="extra --set for both runs (e.g. smoke tests)")
    ap.add_argument("--skip-arm3", action="store_true", help="only the robot (no peer run)")
    ap.add_argument("--runs", help="keep the run folders here (default: a temporary folder, removed)")
    args = ap.parse_args()
    robot = args.robot or default_robot()
    extra = [a for v in args.robot_arg for a in ("--robot-arg", v)]
    extra += [a for v in args.package_path for a in ("--package-path", v)]
    with tempfile.TemporaryDirectory(prefix="own_robot_") as tmp:
        runs = Path(args.runs or tmp)
        runs.mkdir(parents=True, exist_ok=True)
        out = run(robot, extra, runs, "own", args.max_minutes, args.set)
        out["robot_path"] = robot
        if not args.skip_arm3:
            peer = run("arm3", [], runs, "arm3", args.max_minutes, args.set)
            out["arm3"] = peer
            out["env_steps_per_s_vs_arm3"] = round(out["env_steps_per_s"] / max(peer["env_steps_per_s"], 1e-9), 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
