"""Verbs ``vla check|download|eval`` and ``finetune``: VLA pre-flight checks, weights, LoRA fine-tuning."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embodied_ws.cli.argtypes import positive_int
from embodied_ws.core.errors import UserError

if TYPE_CHECKING:
    from embodied_ws.cli import AddVerb

DEFAULT_PRESET = "vla"


def _config(args: argparse.Namespace) -> Any:
    """The run config: the preset, then the env and task a ``record-demos`` dataset was recorded in, then
    ``--set`` and the shortcut flags."""
    from embodied_ws.config.loader import load_config
    from embodied_ws.data.dataset import recorded_sets

    dataset = getattr(args, "dataset", None)
    sets = recorded_sets(Path(dataset)) if dataset else []
    sets += list(getattr(args, "set", None) or [])
    for flag, key in (
        ("robot", "env.robot"),
        ("task", "env.task"),
        ("policy", "vla.policy"),
        ("pretrained", "vla.pretrained"),
    ):
        value = getattr(args, flag, None)
        if value:
            sets.append(f"{key}={value}")
    return load_config(args.config, sets)


def _cmd_check(args: argparse.Namespace) -> int:
    from embodied_ws.vla.preflight import collect, preflight

    cfg = _config(args)
    if not args.json:
        preflight(Path(args.dataset), cfg, only=args.only)
        return 0
    try:
        passed, findings = collect(Path(args.dataset), cfg, only=args.only)
    except UserError as exc:  # fatal: not a dataset, another robot's
        failed = [{"check": "dataset", "where": exc.where, "what": exc.what, "fix": ""}]
        print(json.dumps({"dataset": args.dataset, "passed": [], "failed": failed}))
        raise
    failed = [{"check": f.check, "where": f.where, "what": f.what, "fix": f.fix} for f in findings]
    print(json.dumps({"dataset": args.dataset, "passed": passed, "failed": failed}))
    if findings:  # the JSON on stdout lists them all; stderr gets one line, the exit code is 2
        names = ", ".join(sorted({f.check for f in findings}))
        raise UserError(f"{len(findings)} failure(s) in {names} (listed in the JSON on stdout)", args.dataset)
    return 0


def _cmd_download(args: argparse.Namespace) -> int:
    import contextlib

    from huggingface_hub import snapshot_download

    from embodied_ws.core.outputs import output_folder

    # --out: a folder that is not ours is refused; one of ours resumes (the hub skips what is there)
    owner = output_folder(Path(args.out), "vla download", adds=True) if args.out else contextlib.nullcontext()
    with owner:
        try:
            path = snapshot_download(repo_id=args.repo, local_dir=args.out, revision=args.revision)
        except Exception as exc:  # hub errors: offline, unknown repo, gated model
            raise UserError(f"download failed: {str(exc).splitlines()[0]}", args.repo) from None
    print(json.dumps({"repo": args.repo, "path": path}) if args.json else path)
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from embodied_ws.vla.evaluate import evaluate_vla

    run = Path(args.run)
    run_dir = run if run.is_dir() else Path(args.runs) / args.run
    if not (run_dir / "config.yaml").is_file():
        raise UserError("not a finetune run folder (no config.yaml)", str(run_dir))
    from embodied_ws.core.outputs import output_folder

    with output_folder(run_dir / "eval", "eval", args.overwrite, flag="run"):  # one evaluation at a time
        metrics = evaluate_vla(
            run_dir, args.episodes, video=not args.no_video, progress=not args.json, device=args.device
        )
    print(json.dumps(metrics) if args.json else "\n".join(f"{k}: {v}" for k, v in metrics.items()))
    return 0


def _cmd_finetune(args: argparse.Namespace) -> int:
    from embodied_ws.core.outputs import FolderLock, output_folder, read_marker

    run_dir = Path(args.runs) / args.name
    if args.resume:
        saved = run_dir / "config.yaml"
        if not saved.is_file():
            raise UserError("no such run to resume (config.yaml missing)", str(run_dir))
        args.config = str(saved)
    cfg = _config(args)  # bad values: one line before any folder is made
    if args.resume and read_marker(run_dir) is None:
        owner: Any = FolderLock(run_dir, "finetune")  # a run from before the marker: locked, not re-checked
    else:  # locked for the whole run; a folder that is not ours (or another verb's) is refused
        owner = output_folder(run_dir, "finetune", adds=True, flag="--name")
    with owner:
        return _finetune(args, cfg)


def _finetune(args: argparse.Namespace, cfg: Any) -> int:
    from embodied_ws.vla.finetune import finetune

    summary = finetune(
        Path(args.dataset),
        cfg,
        args.name,
        Path(args.runs),
        resume=args.resume,
        progress=not args.json,
        skip_checks=args.skip_checks,
    )
    print(json.dumps(summary) if args.json else "\n".join(f"{k}: {v}" for k, v in summary.items()))
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config", default=DEFAULT_PRESET, help=f"preset under config/train or a YAML (default: {DEFAULT_PRESET})"
    )
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config value; repeatable")
    p.add_argument("--robot", help="robot the dataset must come from (shortcut for --set env.robot=...)")
    p.add_argument("--task", help="task for replay/eval (shortcut for --set env.task=...)")
    p.add_argument("--pretrained", help="policy to start from: hub id (lerobot/smolvla_base) or folder")


def register(add_verb: AddVerb) -> None:
    """Add ``vla`` (check, download, eval) and ``finetune``."""
    v = add_verb(
        "vla",
        lambda a: a.vla_fn(a),
        "VLA helpers: pre-flight dataset checks, weight download, evaluation in sim.",
        "examples:\n  embodied-ws vla check data/reach_color --policy smolvla\n"
        "  embodied-ws vla download lerobot/smolvla_base\n  embodied-ws vla eval vla1 --episodes 20",
    )
    sub = v.add_subparsers(dest="vla_verb", required=True)
    c = sub.add_parser(
        "check",
        help="pre-flight checks of a dataset against a policy and the robot",
        epilog="example: embodied-ws vla check data/reach_color --policy smolvla",
    )
    c.set_defaults(vla_fn=_cmd_check)
    c.add_argument("dataset", help="LeRobotDataset v3 folder")
    c.add_argument("--policy", choices=["smolvla", "pi0", "act"], help="policy the data is checked for")
    c.add_argument("--only", action="append", help="run only this check (repeatable)")
    c.add_argument("--json", action="store_true", help="print machine-readable JSON")
    _common(c)
    d = sub.add_parser(
        "download",
        help="download policy weights from the Hugging Face hub",
        epilog="example: embodied-ws vla download lerobot/smolvla_base --out models/vla/smolvla_base",
    )
    d.set_defaults(vla_fn=_cmd_download)
    d.add_argument("repo", help="hub repo id, e.g. lerobot/smolvla_base")
    d.add_argument("--out", help="local folder (default: the hub cache)")
    d.add_argument("--revision", help="branch, tag or commit")
    d.add_argument("--json", action="store_true", help="print machine-readable JSON")
    e = sub.add_parser(
        "eval",
        help="evaluate a finetune run in sim (success rate, mp4)",
        epilog="example: embodied-ws vla eval vla1 --episodes 20",
    )
    e.set_defaults(vla_fn=_cmd_eval)
    e.add_argument("run", help="run name under --runs, or a run folder")
    e.add_argument("--runs", default="runs")
    e.add_argument("--episodes", type=positive_int(), default=10)
    e.add_argument("--device", default="cpu")
    e.add_argument("--no-video", action="store_true")
    e.add_argument("--overwrite", action="store_true", help="replace the run's earlier eval/ results")
    e.add_argument("--json", action="store_true", help="print machine-readable JSON")

    f = add_verb(
        "finetune",
        _cmd_finetune,
        "Fine-tune a VLA (SmolVLA default; pi0; ACT baseline) on a LeRobotDataset with PEFT LoRA.",
        "example: embodied-ws finetune data/reach_color --name vla1 --pretrained lerobot/smolvla_base",
    )
    f.add_argument("dataset", help="LeRobotDataset v3 folder")
    f.add_argument("--name", default="vla", help="run name: folder under --runs (default: vla)")
    f.add_argument("--runs", default="runs")
    f.add_argument("--policy", choices=["smolvla", "pi0", "act"], help="shortcut for --set vla.policy=...")
    f.add_argument("--resume", action="store_true", help="continue from the run's latest checkpoint")
    f.add_argument("--skip-checks", action="store_true", help="do not run the pre-flight checks first")
    _common(f)
