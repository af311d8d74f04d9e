"""Verbs ``record-demos``, ``bag2lerobot`` and ``lerobot2bag``: demonstration datasets (LeRobotDataset v3, rosbag2)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embodied_ws.cli.argtypes import int_range, positive_int, seed_int

if TYPE_CHECKING:
    from embodied_ws.cli import AddVerb


def _print(summary: dict[str, Any], as_json: bool) -> None:
    print(json.dumps(summary) if as_json else "\n".join(f"{k}: {v}" for k, v in summary.items()))


def _cmd_record(args: argparse.Namespace) -> int:
    from embodied_ws.core.outputs import FolderLock, claim

    out = Path(args.out)
    with FolderLock(out, "record-demos"):
        claim(out, "record-demos", args.overwrite)  # refused before any rollout
        return _record(args, out)


def _record(args: argparse.Namespace, out: Path) -> int:
    from embodied_ws.data.record import record_demos

    run = None
    if args.policy:
        run = Path(args.policy)
        run = run if run.is_dir() else Path(args.runs) / args.policy
    summary = record_demos(
        args.robot,
        args.task,
        args.episodes,
        out,
        policy_run=run,
        seed=args.seed,
        image_size=[args.image_size[0], args.image_size[1]],
        dr=args.dr,
        video=args.video,
        keep_failed=args.keep_failed,
        progress=not args.json,
        overwrite=args.overwrite,
        config=args.config,
        sets=args.set,
    )
    _print(summary, args.json)
    return 0


def _cmd_bag2lerobot(args: argparse.Namespace) -> int:
    from embodied_ws.core.outputs import FolderLock, claim
    from embodied_ws.data.convert import bag_to_dataset

    bags = [Path(b) for b in args.bags]
    out = Path(args.out)
    with FolderLock(out, "bag2lerobot"):
        claim(out, "bag2lerobot", args.overwrite)  # refused before the bags are read
        mapping = Path(args.map) if args.map else None
        summary = bag_to_dataset(bags, out, mapping, not args.json, overwrite=args.overwrite)
    _print(summary, args.json)
    return 0


def _cmd_lerobot2bag(args: argparse.Namespace) -> int:
    from embodied_ws.core.outputs import FolderLock, claim
    from embodied_ws.data.convert import dataset_to_bag

    out = Path(args.out)
    with FolderLock(out, "lerobot2bag"):  # one writer per output folder
        claim(out, "lerobot2bag", args.overwrite)  # refused before the dataset is read
        mapping = Path(args.map) if args.map else None
        summary = dataset_to_bag(Path(args.dataset), out, mapping, not args.json, overwrite=args.overwrite)
    _print(summary, args.json)
    return 0


def register(add_verb: AddVerb) -> None:
    """Add ``record-demos``, ``bag2lerobot`` and ``lerobot2bag``."""
    r = add_verb(
        "record-demos",
        _cmd_record,
        "Record demonstrations in sim (scripted IK expert or a run's policy, DR on) as a LeRobotDataset v3.",
        "example: embodied-ws record-demos --robot arm3 --task reach_color --episodes 50 --out data/reach_color\n"
        "contact: embodied-ws record-demos --robot panda.xml --task pick_place --set task.gripper=action "
        "--out data/pick_place",
    )
    r.add_argument("--config", help="run preset or YAML of the env (default: vla; push for push, lift and pick_place)")
    r.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config value; repeatable")
    r.add_argument("--robot", help="robot name or MJCF path (default: the preset's, arm3)")
    r.add_argument(
        "--task",
        help="task with a scripted expert: reach, reach_color, push, lift, pick_place (default: the preset's)",
    )
    r.add_argument("--episodes", type=positive_int(), default=50, help="episodes to keep (default: 50)")
    r.add_argument("--out", required=True, help="dataset folder to create (a folder that is not ours is refused)")
    r.add_argument("--overwrite", action="store_true", help="replace an earlier record-demos dataset at --out")
    r.add_argument("--policy", help="a run (name under --runs or folder) whose exported policy acts instead")
    r.add_argument("--runs", default="runs")
    r.add_argument("--seed", type=seed_int(), default=0)
    r.add_argument("--image-size", type=int_range(8, 4096), nargs=2, default=[128, 128], metavar=("H", "W"))
    r.add_argument("--dr", default="default", help="DR preset for the expert (default: default; none: off)")
    r.add_argument("--video", action="store_true", help="store images as mp4 instead of per-frame images")
    r.add_argument("--keep-failed", action="store_true", help="also keep episodes that did not succeed")

    b = add_verb(
        "bag2lerobot",
        _cmd_bag2lerobot,
        "Convert rosbag2 (MCAP) bags of contract topics, one episode each, to a LeRobotDataset v3 "
        "(fps from the map, the bags' metadata or the command stamps).",
        "example: embodied-ws bag2lerobot demo_bags/ --out data/demo --map config/data/bag_map.yaml",
    )
    b.add_argument("bags", nargs="+", metavar="BAG", help="rosbag2 folders, one episode each, or folders of them")
    b.add_argument("--out", required=True, help="dataset folder to create (a folder that is not ours is refused)")
    b.add_argument("--overwrite", action="store_true", help="replace an earlier bag2lerobot dataset at --out")
    b.add_argument("--map", help="topic → feature mapping YAML (default: config/data/bag_map.yaml)")

    lb = add_verb(
        "lerobot2bag",
        _cmd_lerobot2bag,
        "Write each episode of a LeRobotDataset v3 to its own rosbag2 (MCAP), OUT/episode_000000 ...: "
        "joint states, commands, camera, instruction.",
        "example: embodied-ws lerobot2bag data/demo --out demo_bags",
    )
    lb.add_argument("dataset", help="LeRobotDataset v3 folder")
    lb.add_argument("--out", required=True, help="folder to create for the episode bags (one not ours is refused)")
    lb.add_argument("--overwrite", action="store_true", help="replace an earlier lerobot2bag output at --out")
    lb.add_argument("--map", help="topic → feature mapping YAML (default: the one the dataset was made with)")
