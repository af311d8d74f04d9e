"""Robots: load an MJCF or a URDF/xacro (registered name or path) and read what a task needs from the model.

Actuated joints, their limits and the actuators' control ranges come from the model; a URDF/xacro
description is first converted to MJCF (:mod:`embodied_ws.sim.urdf`). For tasks that need an end
effector, :mod:`embodied_ws.sim.robot_defaults` picks it (a tool frame, never a finger) when it is
not named, holds the joints that are not on the arm (grippers) and adds a ``home`` keyframe when the
model has none.
We add one ``framepos`` sensor on the end effector with MjSpec, so batched rollouts return its
position in ``sensordata`` without any Python forward-kinematics call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

from embodied_ws.core.errors import ModelError, UnknownNameError
from embodied_ws.core.paths import models_dir
from embodied_ws.sim import robot_defaults as rd
from embodied_ws.sim.gripper import Gripper, detect_grippers, require_drivable
from embodied_ws.sim.urdf import generate_mjcf, is_description, parse_args

EE_SENSOR = "embodied_ee_pos"
EE_SITE = "embodied_ee"


@dataclass
class Robot:
    """A compiled robot model plus the metadata tasks, DR and export need."""

    name: str
    path: Path
    model: mujoco.MjModel
    joint_names: list[str]
    qpos_idx: np.ndarray
    qvel_idx: np.ndarray
    joint_low: np.ndarray
    joint_high: np.ndarray
    ctrl_low: np.ndarray
    ctrl_high: np.ndarray
    actuator_names: list[str]
    ee_body: str | None = None
    ee_sensor_idx: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    camera_names: list[str] = field(default_factory=list)
    home_qpos: np.ndarray | None = None
    #: the model the per-env copies are made of when nothing renders (no geoms/contacts; free-space tasks)
    physics_model: mujoco.MjModel | None = None
    #: velocity limit per actuator (NaN: unknown), from a URDF's ``<limit velocity>``
    velocity_limit: np.ndarray | None = None
    #: lever arm of each actuated joint at the end effector in the home pose (m/rad), reach-like tasks only
    ee_lever: np.ndarray | None = None
    #: joints held at their home value (grippers), not commanded by the policy
    held_joints: list[str] = field(default_factory=list)
    #: grippers found beyond the arm (:mod:`embodied_ws.sim.gripper`), held or driven
    grippers: list[Gripper] = field(default_factory=list)
    #: ``task.gripper: action``: the actuator index driving each of :attr:`grippers` (empty: held)
    gripper_actuators: list[int] = field(default_factory=list)
    #: the generated MJCF text when the robot came from a URDF/xacro description
    generated_mjcf: str | None = None
    #: damping added per joint by ``env.servo_damping: auto`` (empty: the model's own physics)
    added_damping: dict[str, float] = field(default_factory=dict)
    #: the MjSpec :attr:`model` was compiled from (contact tasks add their scene to a copy: :mod:`.scene`)
    spec: mujoco.MjSpec | None = field(default=None, repr=False, compare=False)
    #: measured joint dynamics (:meth:`dynamics`), probed on first use
    _dynamics: Any = field(default=None, repr=False, compare=False)

    def dynamics(self) -> Any:
        """What the joints actually do in simulation: a :class:`~embodied_ws.sim.dynamics_probe.DynamicsProbe`
        (measured once per model and cached on disk)."""
        if self._dynamics is None:
            from embodied_ws.sim.dynamics_probe import cached_probe

            self._dynamics = cached_probe(self)
        return self._dynamics

    @property
    def nu(self) -> int:
        """Number of actuators (the action dimension)."""
        return int(self.model.nu)

    @property
    def control_dt(self) -> float:
        """Physics timestep of the nominal model, in seconds."""
        return float(self.model.opt.timestep)


def available_robots() -> list[str]:
    """Names of the robots shipped in ``models/`` (folders holding a ``scene.xml``)."""
    root = models_dir()
    return sorted(p.parent.name for p in root.glob("*/scene.xml")) if root.is_dir() else []


def resolve_model_path(robot: str) -> tuple[str, Path]:
    """Map a robot name or an MJCF/URDF/xacro path to ``(name, path)``; unknown names raise a one-line error."""
    if robot.endswith(".xml") or "/" in robot or is_description(robot):
        path = Path(robot).expanduser()
        if not path.is_file():
            kind = "robot description" if is_description(robot) else "MJCF file"
            raise ModelError(f"{kind} not found", str(path))
        stem = path.name.split(".")[0] if is_description(robot) else path.stem
        return stem, path.resolve()
    path = models_dir() / robot / "scene.xml"
    if not path.is_file():
        known = ", ".join(available_robots()) or "none"
        raise UnknownNameError(f"unknown robot {robot!r} (known: {known}, or give a path to an .xml file)", "env.robot")
    return robot, path


def _body_depths(model: mujoco.MjModel) -> np.ndarray:
    depth = np.zeros(model.nbody, dtype=np.int64)
    for b in range(1, model.nbody):
        depth[b] = depth[model.body_parentid[b]] + (1 if model.body_jntnum[b] > 0 else 0)
    return depth


def detect_ee_body(model: mujoco.MjModel) -> str:
    """The leaf body at the end of the longest chain of jointed bodies (ties: the first in the model)."""
    depth = _body_depths(model)
    has_child = np.zeros(model.nbody, dtype=bool)
    has_child[model.body_parentid[1:]] = True
    leaves = [b for b in range(1, model.nbody) if not has_child[b] and depth[b] > 0]
    if not leaves:
        raise ModelError("no jointed body found to use as end effector; set task.ee_body", "task.ee_body")
    best = max(leaves, key=lambda b: (depth[b], -b))
    return mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, best)


def _compile(spec: mujoco.MjSpec, path: Path) -> mujoco.MjModel:
    try:
        return spec.compile()
    except Exception as exc:  # MuJoCo raises ValueError with the compiler message
        raise ModelError(str(exc).strip().splitlines()[0], str(path)) from None


def load_robot(
    robot: str,
    ee_body: str | None = None,
    need_ee: bool = True,
    robot_args: list[str] | tuple[str, ...] = (),
    package_paths: list[str] | tuple[str, ...] = (),
    free_space: bool = False,
    gripper: str = "held",
    timestep: float = 0.0,
) -> Robot:
    """Load a robot by registered name, MJCF path or URDF/xacro path.

    :param robot: name of a folder in ``models/``, or a path to an MJCF, URDF or xacro file
    :param ee_body: body or site used as end effector; auto-detected when ``None``
    :param need_ee: add the end-effector position sensor (reach-like tasks); also holds the joints
        that are not on the arm and adds a ``home`` keyframe when the model has none
    :param robot_args: xacro arguments ``NAME:=VALUE``
    :param package_paths: extra folders holding ROS packages (``$(find)``, ``package://``)
    :param free_space: the task needs no contacts: also build the lean :attr:`Robot.physics_model`
    :param gripper: ``held`` (grippers held at home) or ``action`` (each gripper keeps its actuator and
        becomes one more action; a gripper that cannot be driven raises a one-line :class:`ModelError`)
    :param timestep: physics timestep in seconds (0: the model's own); set on the spec, so the contact scene a
        task adds to it steps at the same rate
    """
    name, path = resolve_model_path(robot)
    generated = None
    try:
        if is_description(str(path)):
            generated, _ = generate_mjcf(path, parse_args(robot_args), package_paths)
            spec = mujoco.MjSpec.from_string(generated)
        else:
            spec = mujoco.MjSpec.from_file(str(path))
    except ModelError:
        raise
    except Exception as exc:
        msg = str(exc).strip().splitlines()
        raise ModelError(" ".join(msg[:2]) if msg else "cannot parse MJCF", str(path)) from None
    if spec.option.integrator == mujoco.mjtIntegrator.mjINT_IMPLICIT:
        # implicitfast drops only the Coriolis/centripetal derivatives from the implicit update: as stable for an
        # arm under position servos and damping, about twice as cheap (Menagerie Panda 11 vs 5 us per step), and
        # what MuJoCo recommends for new models. Applied here so training, evaluation, deployment's simulator,
        # sysid and gap all step the same physics.
        spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    if timestep > 0:
        spec.option.timestep = timestep
    nominal = _compile(spec, path)
    if nominal.nu == 0:
        raise ModelError("model has no actuators, nothing to control", str(path))

    ee_name = None
    held: list[str] = []
    grippers: list[Gripper] = []
    gripper_act: dict[int, int] = {}  # actuator index in the final model -> leader joint id
    if need_ee:
        ee_name = ee_body or rd.detect_ee(nominal) or detect_ee_body(nominal)
        site_id = mujoco.mj_name2id(nominal, mujoco.mjtObj.mjOBJ_SITE, ee_name)
        body_id = mujoco.mj_name2id(nominal, mujoco.mjtObj.mjOBJ_BODY, ee_name)
        if site_id < 0 and body_id < 0:
            raise ModelError(f"no body or site named {ee_name!r} in {path.name}", "task.ee_body")
        arm = rd.arm_joints(nominal, ee_name)
        if mujoco.mj_name2id(nominal, mujoco.mjtObj.mjOBJ_KEY, "home") < 0 and arm:
            rd.set_home_key(spec, nominal, rd.home_pose(nominal, arm, ee_name))
            nominal = _compile(spec, path)
        grippers = detect_grippers(nominal, arm)
        keep, keep_act = list(arm), set()
        if gripper == "action":
            for g in require_drivable(grippers, str(path)):
                keep += [mujoco.mj_name2id(nominal, mujoco.mjtObj.mjOBJ_JOINT, n) for n in g.joints]
                keep_act.add(g.actuator_id)
            kept = rd.kept_actuators(nominal, keep, keep_act)
            gripper_act = {kept.index(g.actuator_id): g.leader_id for g in grippers}
        if arm:
            held = rd.hold_joints(spec, nominal, keep, _home_qpos(nominal), keep_act)
        if site_id >= 0:
            objtype, objname = mujoco.mjtObj.mjOBJ_SITE, ee_name
        else:
            spec.body(ee_name).add_site(name=EE_SITE, size=[0.005, 0.005, 0.005])
            objtype, objname = mujoco.mjtObj.mjOBJ_SITE, EE_SITE
        spec.add_sensor(name=EE_SENSOR, type=mujoco.mjtSensor.mjSENS_FRAMEPOS, objtype=objtype, objname=objname)
    model = _compile(spec, path)
    if model.nu == 0:
        raise ModelError(f"no actuator drives a joint on the way to the end effector {ee_name!r}", str(path))

    joint_ids = []
    for a in range(model.nu):
        if a in gripper_act:  # a gripper's actuator (a tendon one too) stands for its leader joint
            joint_ids.append(gripper_act[a])
            continue
        if int(model.actuator_trntype[a]) not in (
            int(mujoco.mjtTrn.mjTRN_JOINT),
            int(mujoco.mjtTrn.mjTRN_JOINTINPARENT),
        ):
            raise ModelError(f"actuator {a} does not drive a joint; only joint actuators are supported", str(path))
        joint_ids.append(int(model.actuator_trnid[a, 0]))
    qpos_idx = np.array([model.jnt_qposadr[j] for j in joint_ids], dtype=np.int64)
    qvel_idx = np.array([model.jnt_dofadr[j] for j in joint_ids], dtype=np.int64)
    jrange = np.stack(rd.joint_ranges(model, joint_ids), axis=1)
    crange = model.actuator_ctrlrange.copy()
    unlimited_ctrl = ~model.actuator_ctrllimited.astype(bool)
    # an actuator without ctrlrange: a position servo is commanded over its joint's range, anything else [-1, 1]
    servo = rd.position_servos(model)
    crange[unlimited_ctrl & servo] = jrange[unlimited_ctrl & servo]
    crange[unlimited_ctrl & ~servo] = [-1.0, 1.0]

    home = _home_qpos(model)
    ee_idx = np.zeros(0, dtype=np.int64)
    lever = None
    if need_ee:
        sid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SENSOR, EE_SENSOR)
        adr = int(model.sensor_adr[sid])
        ee_idx = np.arange(adr, adr + 3, dtype=np.int64)
        lever = rd.ee_levers(model, home, sid, qvel_idx)

    def names(obj: mujoco.mjtObj, ids: list[int] | range) -> list[str]:
        return [mujoco.mj_id2name(model, obj, i) or f"{obj.name}_{i}" for i in ids]

    return Robot(
        name=name,
        path=path,
        model=model,
        joint_names=names(mujoco.mjtObj.mjOBJ_JOINT, joint_ids),
        qpos_idx=qpos_idx,
        qvel_idx=qvel_idx,
        joint_low=jrange[:, 0].copy(),
        joint_high=jrange[:, 1].copy(),
        ctrl_low=crange[:, 0].copy(),
        ctrl_high=crange[:, 1].copy(),
        actuator_names=names(mujoco.mjtObj.mjOBJ_ACTUATOR, range(model.nu)),
        ee_body=ee_name,
        ee_sensor_idx=ee_idx,
        camera_names=names(mujoco.mjtObj.mjOBJ_CAMERA, range(model.ncam)),
        home_qpos=home,
        physics_model=rd.physics_model(spec, model) if free_space else None,
        velocity_limit=rd.velocity_limits(model, joint_ids),
        ee_lever=lever,
        held_joints=held,
        grippers=grippers,
        gripper_actuators=list(gripper_act),
        generated_mjcf=generated,
        spec=spec,
    )


def published_joints(model: mujoco.MjModel) -> list[int]:
    """Hinge and slide joints: what ``/joint_states`` carries (free/ball joints are not in the topic contract).

    :param model: the robot's model
    :returns: joint ids in model order
    """
    kinds = (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE)
    return [j for j in range(model.njnt) if mujoco.mjtJoint(int(model.jnt_type[j])) in kinds]


def _home_qpos(model: mujoco.MjModel) -> np.ndarray:
    """The ``home`` keyframe's qpos when the model has one, else the model's qpos0."""
    key = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, "home")
    return model.key_qpos[key].copy() if key >= 0 else model.qpos0.copy()
