"""Verbs ``record``, ``sysid collect``, ``sysid fit`` and ``gap`` (sim-to-real loop)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embodied_ws.cli.argtypes import finite_float, nonneg_int, positive_float, positive_int, seed_int
from embodied_ws.core.errors import UserError

if TYPE_CHECKING:
    from embodied_ws.cli import AddVerb


def _print(args: argparse.Namespace, result: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(result))
        return
    for k, v in result.items():
        print(f"{k}: {json.dumps(v) if isinstance(v, (dict, list)) else v}")


def _duration(value: float | None, flag: str = "--duration") -> float | None:
    if value is not None and not value > 0:
        raise UserError(f"must be > 0, got {value:g}", flag)
    return value


def _cmd_record(args: argparse.Namespace) -> int:
    from embodied_ws.data.bag import DEFAULT_TOPICS

    topics = args.topics or [*DEFAULT_TOPICS, f"/{args.controller}/commands"]
    _duration(args.duration)
    out = Path(args.out)
    from embodied_ws.core.outputs import FolderLock, check_creatable

    with FolderLock(out, "record"):  # a second recorder into this --out gets one line naming this PID
        if out.exists():
            raise UserError("bag already exists (choose another --out)", str(out))
        check_creatable(out)  # an unwritable place: one line before ROS starts
        from embodied_ws.ros.recorder import record, topic_types

        result = record(out, topic_types(topics, args.controller), args.duration)
    _print(args, result)
    return 0


def _robot(name: str) -> Any:
    from embodied_ws.sim.robot import load_robot

    return load_robot(name, need_ee=False)


def _cmd_collect(args: argparse.Namespace) -> int:
    _duration(args.duration)
    out = Path(args.out)
    from embodied_ws.core.outputs import FolderLock, check_creatable

    with FolderLock(out, "sysid collect"):
        if out.exists():
            raise UserError("bag already exists (choose another --out)", str(out))
        check_creatable(out)
        robot = _robot(args.robot)
        from embodied_ws.ros.sysid_collect import collect

        result = collect(robot, args.duration, out, args.controller, args.seed, args.max_step, args.wait)
    _print(args, result)
    return 0


def _cmd_fit(args: argparse.Namespace) -> int:
    from embodied_ws.core.outputs import output_folder
    from embodied_ws.sysid.fit import FIT_PARAMS

    # every option is checked before anything is loaded or fitted (a fit takes a minute)
    params = tuple(args.params.split(",")) if args.params else FIT_PARAMS
    unknown = [p for p in params if p not in FIT_PARAMS]
    if unknown:
        raise UserError(f"cannot fit {unknown[0]!r} (fittable: {', '.join(FIT_PARAMS)})", "--params")
    base = _base_dr(args.base_dr)
    out = Path(args.out)
    with output_folder(out, "sysid fit", args.overwrite):  # locked, refused before the fit if not ours
        return _fit(args, out, params, base)


def _base_dr(name: str) -> dict[str, Any]:
    """The ``--base-dr`` preset or file, read and validated as a DR file (one line naming it when wrong)."""
    from embodied_ws.config.loader import read_yaml, resolve_preset
    from embodied_ws.core.errors import ConfigError
    from embodied_ws.randomization.spec import parse_dr

    try:
        path = resolve_preset(name, "dr")
        data, lines = read_yaml(path)
    except ConfigError as exc:
        raise ConfigError(exc.what, f"--base-dr {exc.where or name}") from None
    parse_dr(data or {}, str(path), lines)
    return data or {}


def _fit(args: argparse.Namespace, out: Path, params: tuple[str, ...], base: dict[str, Any]) -> int:
    from rich.progress import Progress

    from embodied_ws.sysid.fit import fit
    from embodied_ws.sysid.outputs import overlays, write_outputs
    from embodied_ws.sysid.replay import load_recording

    bag = Path(args.bag)
    robot = _robot(args.robot)
    rec = load_recording(bag, robot)
    latencies = range(args.max_latency + 1)
    with Progress(disable=args.json, transient=True) as bar:
        task = bar.add_task("fitting latency candidates", total=len(latencies))
        result = fit(robot, rec, latencies, params, args.segment, on_step=lambda _: bar.advance(task))
    sims = overlays(robot, rec, result, args.segment)
    info = write_outputs(out, result, rec, robot.name, str(bag), base, sims, args.segment)
    _print(args, info)
    return 0


def _cmd_gap(args: argparse.Namespace) -> int:
    from embodied_ws.core.outputs import output_folder
    from embodied_ws.randomization.plant import load_plant
    from embodied_ws.sysid.gap import gap_on_bag, gap_on_plant, run_config

    run = Path(args.run)
    run_dir = run if run.is_dir() else Path(args.runs) / args.run
    if (args.plant is None) == (args.real is None):
        raise UserError("give exactly one of --plant FILE (stand-in) or --real BAG (recorded deployment)", "gap")
    plant = load_plant(args.plant) if args.plant else None
    sim_plant = load_plant(args.sim_plant) if args.sim_plant else None
    out = Path(args.out) if args.out else default_gap_folder(run_dir, args.plant, args.real)
    if not args.out:
        run_config(run_dir)  # not a run folder: say so before creating anything in it
    with output_folder(out, "gap", args.overwrite):
        if plant is not None:
            result = gap_on_plant(run_dir, plant, out, args.episodes, args.seed)
        else:
            result = gap_on_bag(run_dir, Path(args.real), out, sim_plant)
    _print(args, result)
    return 0


def default_gap_folder(run_dir: Path, plant: str | None, real: str | None) -> Path:
    """``RUN/gap/plant-<plant file stem>`` or ``RUN/gap/real-<bag folder name>``: a report per mode and source."""
    if plant:
        return run_dir / "gap" / f"plant-{Path(plant).stem}"
    return run_dir / "gap" / f"real-{Path(real or 'bag').resolve().name}"


def register(add_verb: AddVerb) -> None:
    """Add ``record``, ``sysid`` (``collect``, ``fit``) and ``gap``."""
    r = add_verb(
        "record",
        _cmd_record,
        "Record contract topics to a rosbag2 MCAP bag (readable up to the last flush if killed).",
        "example: embodied-ws record --out bags/run1 --duration 30",
    )
    r.add_argument("--out", required=True, help="bag folder to create")
    r.add_argument("--topics", nargs="+", help="topics (default: /joint_states, commands, task, estop, diagnostics)")
    r.add_argument("--duration", type=positive_float(), help="seconds to record (default: until Ctrl-C)")
    r.add_argument("--controller", default="joint_group_position_controller", help="commands topic's controller")

    s = add_verb(
        "sysid",
        _cmd_fit,  # never reached: argparse requires collect or fit, whose own defaults win
        "System identification: excite the robot and record (collect), fit the simulator to it (fit).",
        "example: embodied-ws sysid collect --robot arm3 --duration 30 --out bags/sysid1\n"
        "         embodied-ws sysid fit bags/sysid1 --robot arm3 --out sysid/arm3 --json",
    )
    sub = s.add_subparsers(dest="action", required=True)
    c = sub.add_parser(
        "collect",
        help="excite all joints (random steps + 0.2-3 Hz chirp, inside the limits) and record",
        description="Drive the robot (or mujoco_sim_node plant:=FILE) through the topic contract with ramped random "
        "steps plus a 0.2-3 Hz chirp on every joint, inside the joint limits, and record /joint_states and the "
        "commands to an MCAP bag.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example: embodied-ws sysid collect --robot arm3 --duration 30 --out bags/sysid1",
    )
    c.set_defaults(fn=_cmd_collect)
    c.add_argument("--robot", required=True, help="robot name or MJCF path")
    c.add_argument("--duration", type=positive_float(), default=30.0, help="seconds of excitation (default 30)")
    c.add_argument("--out", required=True, help="bag folder to create")
    c.add_argument("--controller", default="joint_group_position_controller")
    c.add_argument("--seed", type=seed_int(), default=0)
    c.add_argument(
        "--max-step",
        type=finite_float(0.0, math.pi, low_inclusive=False),
        default=0.5,
        help="largest set-point change per command (rad, at most pi)",
    )
    c.add_argument(
        "--wait", type=positive_float(3600.0), default=10.0, help="seconds to wait for the first /joint_states"
    )
    c.add_argument("--json", action="store_true", help="print machine-readable JSON")

    f = sub.add_parser(
        "fit",
        help="fit damping, armature, friction loss, gain, mass scales and latency to a bag",
        description="Replay the bag's commands in MuJoCo and fit scales of damping, armature, friction loss, servo "
        "gain and masses plus the command latency (scipy least_squares per latency). Writes fit.yaml (a plant "
        "file), dr.yaml (DR re-centred on the fit), fit.json and overlay PNGs; says which parameters the data "
        "hardly constrains.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example: embodied-ws sysid fit bags/sysid1 --robot arm3 --out sysid/arm3 --json",
    )
    f.set_defaults(fn=_cmd_fit)
    f.add_argument("bag", help="bag folder (from sysid collect or record)")
    f.add_argument("--robot", required=True, help="robot name or MJCF path the bag was recorded on")
    f.add_argument("--out", required=True, help="folder for fit.yaml, dr.yaml, fit.json, overlays")
    f.add_argument("--overwrite", action="store_true", help="replace an earlier sysid fit in --out")
    f.add_argument("--max-latency", type=nonneg_int(50), default=4, help="largest latency candidate (control periods)")
    f.add_argument("--params", help="comma-separated DR parameters to fit (default: all five)")
    f.add_argument("--segment", type=positive_float(3600.0), default=4.0, help="replay segment length in seconds")
    f.add_argument("--base-dr", default="default", help="DR preset or YAML re-centred into dr.yaml")
    f.add_argument("--json", action="store_true", help="print machine-readable JSON")

    g = add_verb(
        "gap",
        _cmd_gap,
        "Sim-to-real gap report (report.md + PNGs): a run's policy on sim vs a stand-in, or a recorded deployment.",
        "example: embodied-ws gap reach1 --plant tests/fixtures/plants/hidden.yaml\n"
        "         embodied-ws gap reach1 --real bags/deploy1",
    )
    g.add_argument("run", help="run name under --runs, or a run folder")
    g.add_argument("--runs", default="runs")
    g.add_argument("--plant", help="plant YAML: compare sim with an in-process stand-in robot")
    g.add_argument("--real", help="bag of a recorded deployment: compare it with its commands replayed in sim")
    g.add_argument("--sim-plant", help="with --real: simulate this plant (e.g. a sysid fit.yaml) instead of nominal")
    g.add_argument("--episodes", type=positive_int(), default=50)
    g.add_argument("--seed", type=seed_int(), default=1234)
    g.add_argument("--out", help="report folder (default: RUN/gap/plant-<plant file stem> or RUN/gap/real-<bag name>)")
    g.add_argument("--overwrite", action="store_true", help="replace an earlier gap report in that folder")
