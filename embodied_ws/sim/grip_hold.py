"""Can the gripper hold the object? Close on it in simulation, let gravity pull, measure the slip.

The object (a body with a free joint) is placed at the centre of the fingers' geoms with the gripper open
and held there while the gripper closes for :data:`CLOSE_S`; then it is let go and the arm holds its pose
for :data:`HOLD_S` against gravity (the load of a slow lift). What comes back:

- **slip**: how far the object moved relative to the fingers while held (m); more than :data:`SLIP_LIMIT`
  is a drop (no finger contact at the end is one too);
- **friction margin**: ``μ · ΣN / (m · g)``, the friction the finger contacts can give (their normal forces
  ``ΣN`` times the contact friction ``μ``) over the object's weight: below 1 the grasp holds only by
  luck (or by geometry), 2 or more leaves room for DR of mass and friction.

Used by ``embodied-ws task check`` for tasks with an object and ``task.gripper: action``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import mujoco
import numpy as np

#: seconds the gripper closes on the pinned object, then seconds the object hangs in the closed fingers
CLOSE_S = 0.5
HOLD_S = 1.0
#: object displacement relative to the fingers over the hold (m) counted as a drop; MuJoCo's soft contacts let a
#: held object creep a few mm/s, so less than this is creep, not a drop
SLIP_LIMIT = 0.02
#: slip over the hold (m) above which a held object is reported as creeping
CREEP_WARN = 0.01


@dataclass
class HoldResult:
    """What :func:`grip_hold` measured."""

    held: bool
    slip_m: float  # object displacement relative to the fingers during the hold
    normal_force_n: float  # sum of the finger contacts' normal forces at the end
    friction: float  # the smallest sliding friction of those contacts
    weight_n: float  # object mass times gravity
    margin: float  # friction * normal_force / weight (0: no contact)

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
) -> HoldResult:
    """Close the gripper on ``object_body`` and let it hang for ``hold_s`` (module docstring).

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
    mujoco.mj_step(model, data, nstep=max(1, round(hold_s / model.opt.timestep)))
    mujoco.mj_forward(model, data)
    slip = float(np.linalg.norm(relative() - start))
    normal, mu = 0.0, np.inf
    force = np.zeros(6)
    finger_set = set(fingers)
    for i in range(data.ncon):
        c = data.contact[i]
        pair = {int(c.geom1), int(c.geom2)}
        if pair & finger_set and pair & obj_geoms:
            mujoco.mj_contactForce(model, data, i, force)
            normal += abs(float(force[0]))
            mu = min(mu, float(c.friction[0]))
    weight = float(model.body_subtreemass[body] * np.linalg.norm(model.opt.gravity))
    mu = 0.0 if not np.isfinite(mu) else mu
    margin = mu * normal / weight if weight > 0 else float("inf")
    held = bool(np.isfinite(slip) and slip < SLIP_LIMIT and normal > 0)
    return HoldResult(held, slip, normal, mu, weight, margin)
