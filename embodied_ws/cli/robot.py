"""Verb ``robot show``: what the toolkit makes of a robot (MJCF, URDF or xacro), and a PNG of its home pose."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from embodied_ws.cli import AddVerb


def add_robot_options(p: argparse.ArgumentParser) -> None:
    """``--robot-arg`` and ``--package-path`` (shared by ``train`` and ``robot show``).

    :param p: the verb's parser
    """
    p.add_argument("--robot-arg", action="append", default=[], metavar="NAME:=VALUE", help="xacro argument; repeatable")
    p.add_argument(
        "--package-path",
        action="append",
        default=[],
        metavar="DIR",
        help="folder holding ROS packages (DIR/pkg/package.xml) for $(find pkg) and package://; repeatable",
    )


def describe(robot: Any) -> dict[str, Any]:
    """Joints, limits, actuators, held joints, grippers, mimic couplings and end effector of a loaded robot.

    :param robot: a :class:`embodied_ws.sim.robot.Robot`
    """
    import mujoco
    import numpy as np

    m = robot.model
    acts = []
    for a in range(m.nu):
        acts.append(
            {
                "name": robot.actuator_names[a],
                "joint": robot.joint_names[a],
                "kp": round(float(m.actuator_gainprm[a, 0]), 3),
                "kv": round(float(-m.actuator_biasprm[a, 2]), 3) + 0.0,  # no "-0.0"
                "ctrlrange": [round(float(robot.ctrl_low[a]), 4), round(float(robot.ctrl_high[a]), 4)],
                "forcerange": [round(float(v), 3) for v in m.actuator_forcerange[a]]
                if m.actuator_forcelimited[a]
                else None,
            }
        )
    vel = robot.velocity_limit if robot.velocity_limit is not None else np.full(m.nu, np.nan)
    joints = [
        {
            "name": n,
            "range": [round(float(lo), 4), round(float(hi), 4)],
            "velocity_limit": None if not np.isfinite(v) else float(v),
        }
        for n, lo, hi, v in zip(robot.joint_names, robot.joint_low, robot.joint_high, vel, strict=True)
    ]
    name = lambda obj, i: mujoco.mj_id2name(m, obj, i)  # noqa: E731
    mimic = [
        {
            "follower": name(mujoco.mjtObj.mjOBJ_JOINT, m.eq_obj1id[e]),
            "leader": name(mujoco.mjtObj.mjOBJ_JOINT, m.eq_obj2id[e]),
        }
        for e in range(m.neq)
        if m.eq_type[e] == mujoco.mjtEq.mjEQ_JOINT and m.eq_obj2id[e] >= 0
    ]
    return {
        "robot": robot.name,
        "path": str(robot.path),
        "dof": int(m.nu),
        "joints": joints,
        "actuators": acts,
        "held_joints": robot.held_joints,
        "grippers": [g.to_dict() for g in robot.grippers],
        "mimic": mimic,
        "end_effector": robot.ee_body,
        "home": [round(float(v), 4) for v in robot.home_qpos[robot.qpos_idx]],
    }


def render_home(robot: Any, size: tuple[int, int] = (480, 640)) -> bytes:
    """A PNG (bytes) of the robot at its home pose (free camera framing the whole model).

    :param robot: a loaded robot
    :param size: (height, width)
    """
    import imageio.v3 as iio
    import mujoco
    import numpy as np

    model = robot.model
    model.vis.global_.offwidth = max(model.vis.global_.offwidth, size[1])
    model.vis.global_.offheight = max(model.vis.global_.offheight, size[0])
    data = mujoco.MjData(model)
    data.qpos[:] = robot.home_qpos
    mujoco.mj_forward(model, data)
    cam = mujoco.MjvCamera()
    mujoco.mjv_defaultFreeCamera(model, cam)
    pts = data.xpos[1:] if model.nbody > 1 else data.xpos
    cam.lookat[:] = (pts.min(axis=0) + pts.max(axis=0)) / 2.0
    cam.azimuth, cam.elevation = 135.0, -20.0
    cam.distance = 1.6 * max(float(np.ptp(pts, axis=0).max()), 0.3) + 0.3
    model.vis.headlight.ambient[:] = 0.45
    model.vis.headlight.diffuse[:] = 0.6
    opt = mujoco.MjvOption()
    opt.geomgroup[:] = 1  # visual and collision groups alike
    with mujoco.Renderer(model, *size) as renderer:
        renderer.update_scene(data, camera=cam, scene_option=opt)
        image = renderer.render()
    return iio.imwrite("<bytes>", image, extension=".png")


def reach_defaults(robot: Any) -> dict[str, Any]:
    """What the default ``reach`` preset makes of this robot: action mode (``auto`` resolved), episode length and
    end-effector speed bound.

    :param robot: a :class:`embodied_ws.sim.robot.Robot` loaded with an end-effector sensor
    """
    from embodied_ws.config.loader import load_config, load_dr
    from embodied_ws.sim.core import EnvCore, ee_speed

    cfg = load_config("reach", [f"env.robot={robot.path}"])
    core = EnvCore(cfg, load_dr("none"), 1, 0, robot=robot)
    lever = robot.ee_lever
    return {
        "action_mode": core.io.mode,
        "episode_steps": int(core.episode_steps),
        "episode_seconds": round(core.episode_steps * core.control_dt, 2),
        "ee_speed_bound_m_s": None
        if lever is None
        else round(ee_speed(core.delta_scale, core.ctrl_half, lever, core.control_dt), 2),
    }


def gripper_line(g: dict[str, Any]) -> str:
    """``gripper: finger_joint1 (+ finger_joint2), actuator8, stroke 0.04 m (gap 0.012-0.085 m), force 100 N ...``
    from a :meth:`~embodied_ws.sim.gripper.Gripper.to_dict` dict."""
    if not g["drivable"]:
        return f"gripper: joints {', '.join(g['joints'])}: cannot be an action ({g['problem']})"
    unit, force_unit = ("m", "N") if g["kind"] == "slide" else ("rad", "N·m")
    coupled = g["followers"] + [f"{n} (linkage)" for n in g["linkage"]]
    gap = (
        f" (fingertip gap {g['gap_closed']:.3f}-{g['gap_open']:.3f} m)"
        if g["gap_closed"] is not None and g["gap_open"] is not None
        else ""
    )
    force = f"{g['force']:g} {force_unit}" if g["force"] is not None else "unlimited"
    return (
        f"gripper: {g['leader']}"
        + (f" (+ {', '.join(coupled)} following)" if coupled else "")
        + f", actuator {g['actuator']}, stroke {g['stroke']:.4g} {unit}{gap}, force {force}; "
        f"action -1 closed ({g['leader']}={g['closed']:.4g}), +1 open ({g['open']:.4g})"
    )


def _dynamics_line(d: dict[str, Any]) -> str:
    """``joint: declared 2.0/s, measured 0.61/s, settles in 0.35 s, overshoot 0 %`` (from the probe's dict)."""
    if d["measured_speed"] is None:
        return f"{d['joint']}: not a position servo (not measured)"
    declared = f"{d['declared_speed']:.2f}/s" if d["declared_speed"] is not None else "none"
    settle = f"settles in {d['settle_s']:.2f} s" if d["settle_s"] is not None else "does not settle within 2 s"
    return (
        f"{d['joint']}: declared {declared}, measured {d['measured_speed']:.2f}/s, {settle}, "
        f"overshoot {100 * d['overshoot']:.0f} %" + (" (underdamped)" if d["underdamped"] else "")
    )


def _cmd_robot(args: argparse.Namespace) -> int:
    from embodied_ws.core.outputs import write_files
    from embodied_ws.sim.robot import load_robot
    from embodied_ws.sim.urdf import generate_mjcf, is_description, parse_args

    robot = load_robot(args.path, args.ee_body or None, True, args.robot_arg, args.package_path)
    info = describe(robot)
    info["dynamics"] = robot.dynamics().to_dict()["joints"]
    info["reach_preset"] = reach_defaults(robot)
    out = Path(args.out)
    files: dict[Path, bytes] = {}
    if is_description(args.path):
        _, notes = generate_mjcf(args.path, parse_args(args.robot_arg), args.package_path)
        mjcf = out / f"{robot.name}.xml"
        files[mjcf] = (robot.generated_mjcf or "").encode()
        info["generated_mjcf"] = str(mjcf)
        info["notes"] = notes
    png = out / f"{robot.name}_home.png"
    if not args.no_image:
        files[png] = render_home(robot)
        info["image"] = str(png)
    write_files(files, args.overwrite)  # --out may be the user's folder: a file with other content needs --overwrite
    if args.json:
        print(json.dumps(info))
        return 0
    print(f"robot: {info['robot']} ({info['path']}), {info['dof']} commanded joints")
    print("joints (range, velocity limit):")
    for j in info["joints"]:
        print(
            f"  {j['name']}: [{j['range'][0]}, {j['range'][1]}]"
            + (f", {j['velocity_limit']}/s" if j["velocity_limit"] else "")
        )
    print("actuators (position servos):")
    for a in info["actuators"]:
        print(f"  {a['name']}: kp={a['kp']} kv={a['kv']} ctrl={a['ctrlrange']} force={a['forcerange']}")
    print("measured in simulation (speed under a saturated command, settling and overshoot of a small step):")
    for d in info["dynamics"]:
        print("  " + _dynamics_line(d))
    ringing = [d["joint"] for d in info["dynamics"] if d["underdamped"]]
    if ringing:
        from embodied_ws.sim.dynamics_probe import UNDERDAMPED_OVERSHOOT

        print(
            f"warning: underdamped servos (overshoot > {100 * UNDERDAMPED_OVERSHOOT:.0f} %): {', '.join(ringing)}; "
            "`--set env.servo_damping=auto` adds joint damping up to critical (default none: your physics as written)"
        )
    print(f"held (not learned): {', '.join(info['held_joints']) or 'none'}")
    for g in info["grippers"]:
        print(gripper_line(g) + ("" if robot.gripper_actuators else "; held (task.gripper: held)"))
    if not info["grippers"]:
        print("gripper: none found beyond the wrist")
    for c in info["mimic"]:
        print(f"mimic: {c['follower']} follows {c['leader']}")
    print(f"end effector: {info['end_effector']}")
    print(f"home: {info['home']}")
    r = info["reach_preset"]
    print(
        f"reach preset: {r['action_mode']} actions, {r['episode_steps']}-step episodes ({r['episode_seconds']} s), "
        "end effector at most "
        f"{r['ee_speed_bound_m_s']} m/s at home"
    )
    for n in info.get("notes", []):
        print(f"note: {n}")
    for key in ("generated_mjcf", "image"):
        if key in info:
            print(f"{key.replace('_', ' ')}: {info[key]}")
    return 0


def register(add_verb: AddVerb) -> None:
    """Add ``robot show``."""
    p = add_verb(
        "robot",
        _cmd_robot,
        "Show a robot (MJCF, URDF or xacro): joints, limits, servos, end effector; renders its home pose.",
        "example: embodied-ws robot show my_description/urdf/arm.urdf.xacro --robot-arg dof:=7 "
        "--package-path ~/ws/src --out /tmp/arm",
    )
    p.add_argument("action", choices=["show"], help="what to do (show)")
    p.add_argument("path", help="robot name, or a path to an .xml, .urdf or .urdf.xacro file")
    add_robot_options(p)
    p.add_argument("--ee-body", default="", help="end-effector body or site (default: auto-detected)")
    p.add_argument("--out", default=".", help="folder for the PNG and the generated MJCF (default: .)")
    p.add_argument("--no-image", action="store_true", help="skip rendering the PNG")
    p.add_argument("--overwrite", action="store_true", help="replace files of those names that hold something else")
