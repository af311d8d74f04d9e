"""Can the gripper hold the object? Close on it in simulation, let gravity pull, measure the slip.

The object (a body with a free joint) is placed at the centre of the fingers' geoms with the gripper open
and held there while the gripper closes for :data:`CLOSE_S`; then it is let go, and the arm holds its pose
while the load of a lift acts on the grasp: for :data:`LIFT_S` gravity is raised by :data:`LIFT_ACCEL_G`
(in the gripper's frame an upward acceleration of the arm and more gravity are the same load, so no motion
plan is needed for any arm), then :data:`HOLD_S` at nominal gravity. What comes back:

- **slip**: how far the object moved relative to the fingers while held (m); more than :data:`SLIP_LIMIT`
  is a drop (no finger contact at the end is one too);
- **friction margin**: ``μ · ΣN / (m · g)``, the friction the finger contacts can give when the object is
  let go (their normal forces ``ΣN`` times the contact friction ``μ``) over the object's weight.

The slip decides, not the margin: MuJoCo's soft contacts with the default pyramidal friction cone creep and
let go well inside the Coulomb limit (a 50 g cube at margin 2.8 slides out of the fingers; with
``<option cone="elliptic" impratio="10"/>`` it moves 1.4 mm), so :func:`needs_elliptic` tells when that
option is the fix.

Used by ``embodied-ws task check`` for tasks with an object and ``task.gripper: action``.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from typing import Any

import mujoco
import numpy as np

#: seconds the gripper closes on the pinned object, then seconds the object hangs in the closed fingers
CLOSE_S = 0.5
HOLD_S = 1.0
#: the lift: seconds of an upward acceleration of this many g (applied as that much more gravity)
LIFT_S = 0.3
LIFT_ACCEL_G = 0.5
#: object displacement relative to the fingers over the hold (m) counted as a drop; MuJoCo's soft contacts let a
#: held object creep a few mm/s, so less than this is creep, not a drop
SLIP_LIMIT = 0.03
#: slip over the hold (m) above which a held object is reported as creeping
CREEP_WARN = 0.015


@dataclass
class HoldResult:
    """What :func:`grip_hold` measured."""

    held: bool
    slip_m: float  # object displacement relative to the fingers during the lift and the hold
    normal_force_n: float  # sum of the finger contacts' normal forces when the object is let go
    friction: float  # the smallest sliding friction of those contacts
    weight_n: float  # object mass times gravity
    margin: float  # friction * normal_force / weight (0: no contact)
    contact_at_end: bool  # the fingers still touch the object after the hold

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, rounded."""
        return {k: (round(v, 5) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def free_bodies(model: mujoco.MjModel) -> list[str]:
    """Names of the bodies that carry a free joint (loose objects in the scene), in body order."""
    out = []
    for j in range(model.njnt):
        if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
            out.append(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, int(model.jnt_bodyid[j])) or "")
    return [n for n in out if n]


def _subtree_geoms(model: mujoco.MjModel, roots: set[int]) -> list[int]:
    """Collidable geoms on ``roots`` or their descendants."""
    inside = set(roots)
    for b in range(model.nbody):  # parents come before children in MuJoCo's body order
        if int(model.body_parentid[b]) in inside:
            inside.add(b)
    return [
        g
        for g in range(model.ngeom)
        if int(model.geom_bodyid[g]) in inside and (model.geom_contype[g] or model.geom_conaffinity[g])
    ]


def grip_hold(
    model: mujoco.MjModel,
    qpos: np.ndarray,
    ctrl_open: np.ndarray,
    ctrl_closed: np.ndarray,
    finger_joints: list[int],
    object_body: str,
    close_s: float = CLOSE_S,
    hold_s: float = HOLD_S,
    lift_s: float = LIFT_S,
    lift_accel_g: float = LIFT_ACCEL_G,
) -> HoldResult:
    """Close the gripper on ``object_body``, load it as a lift does, let it hang for ``hold_s`` (module docstring).

    :param model: a model with contacts (not the lean free-space copy)
    :param qpos: the configuration to grasp in, gripper open
    :param ctrl_open: actuator controls holding the arm with the gripper open
    :param ctrl_closed: the same with the gripper closed
    :param finger_joints: joint ids of the gripper (their bodies and descendants are the fingers)
    :param object_body: name of the object (a body with a free joint)
    :raises ValueError: the object has no free joint or the gripper has no collidable geom
    """
    body = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, object_body)
    joints = [
        j for j in range(model.njnt) if model.jnt_bodyid[j] == body and model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE
    ]
    if body < 0 or not joints:
        raise ValueError(f"object {object_body!r} is not a body with a free joint")
    fingers = _subtree_geoms(model, {int(model.jnt_bodyid[j]) for j in finger_joints})
    obj_geoms = set(_subtree_geoms(model, {body}))
    if not fingers or not obj_geoms:
        raise ValueError("the gripper or the object has no collidable geom")
    qa, va = int(model.jnt_qposadr[joints[0]]), int(model.jnt_dofadr[joints[0]])
    data = mujoco.MjData(model)
    data.qpos[:] = qpos
    data.ctrl[:] = ctrl_open
    mujoco.mj_forward(model, data)
    data.qpos[qa : qa + 3] = data.geom_xpos[fingers].mean(axis=0)
    mujoco.mj_forward(model, data)
    pinned = data.qpos[qa : qa + 7].copy()
    data.ctrl[:] = ctrl_closed
    for _ in range(max(1, round(close_s / model.opt.timestep))):
        data.qpos[qa : qa + 7] = pinned
        data.qvel[va : va + 6] = 0.0
        mujoco.mj_step(model, data)
    mujoco.mj_forward(model, data)

    def relative() -> np.ndarray:
        return data.xpos[body] - data.geom_xpos[fingers].mean(axis=0)

    start = relative()
    normal, mu = _contact_forces(model, data, set(fingers), obj_geoms)  # the grasp at release
    lift = copy.copy(model)  # the caller's model keeps its gravity
    lift.opt.gravity[:] = model.opt.gravity * (1.0 + lift_accel_g)
    mujoco.mj_step(lift, data, nstep=max(1, round(lift_s / model.opt.timestep)))
    mujoco.mj_step(model, data, nstep=max(1, round(hold_s / model.opt.timestep)))
    mujoco.mj_forward(model, data)
    slip = float(np.linalg.norm(relative() - start))
    end_normal, _ = _contact_forces(model, data, set(fingers), obj_geoms)
    weight = float(model.body_subtreemass[body] * np.linalg.norm(model.opt.gravity))
    margin = mu * normal / weight if weight > 0 else float("inf")
    held = bool(np.isfinite(slip) and slip < SLIP_LIMIT and end_normal > 0)
    return HoldResult(held, slip, normal, mu, weight, margin, end_normal > 0)


def needs_elliptic(model: mujoco.MjModel) -> bool:
    """Whether the model grasps with the contacts that creep: a pyramidal friction cone or ``impratio`` < 5."""
    return bool(model.opt.cone == mujoco.mjtCone.mjCONE_PYRAMIDAL or model.opt.impratio < 5)


def _contact_forces(
    model: mujoco.MjModel, data: mujoco.MjData, fingers: set[int], obj: set[int]
) -> tuple[float, float]:
    """``(sum of the normal forces, smallest sliding friction)`` of the contacts between fingers and object
    (``(0, 0)`` without contact)."""
    normal, mu = 0.0, np.inf
    force = np.zeros(6)
    for i in range(data.ncon):
        c = data.contact[i]
        pair = {int(c.geom1), int(c.geom2)}
        if pair & fingers and pair & obj:
            mujoco.mj_contactForce(model, data, i, force)
            normal += abs(float(force[0]))
            mu = min(mu, float(c.friction[0]))
    return normal, (mu if np.isfinite(mu) else 0.0)
