"""Parallel-jaw grippers: found from the model's structure, and one normalised open/close action each.

Detection (no names involved, only the kinematic tree, actuators, tendons and equalities):

- **the gripper's joints**: the movable joints beyond the arm's last joint (in the subtree of the
  wrist body) that are not arm joints. Fingers welded on (no movable joint) are no gripper.
- **the leader**: the joint its one actuator drives: a joint actuator's joint, or the first joint of
  the fixed tendon a tendon actuator pulls that follows no other by a joint equality (Menagerie Panda:
  ``actuator8`` on tendon ``split``, leader ``finger_joint2``, as its equality makes joint1 follow joint2).
- **followers**: joints coupled to the leader by joint equalities (URDF ``<mimic>``, transitively:
  Robotiq-style chains where several joints follow one) or by the actuated tendon.
- **linkage joints**: passive joints closed by a ``connect``/``weld`` equality (a four-bar finger):
  they move with the leader through the constraint.
- **drivable**: exactly one actuator, a position-like one (affine bias ``-k · length``: a set-point),
  every other joint a follower or a linkage joint, every tendon joint coupled to the leader. Otherwise
  the gripper is listed with the reason it cannot be driven (``problem``); it is refused only when
  ``task.gripper: action`` asks to drive it (:func:`require_drivable`).

Mapping: action ``a ∈ [-1, 1]`` → leader set-point, **-1 closed, +1 open**. Which end of the leader's
range is *open* is decided by geometry: the end at which the fingertips are farther apart (fingertip =
the geom of a finger farthest from the palm; with one moving jaw, its distance to the nearest geom of
the body it hangs from, the fixed jaw). When no geom allows the measure, the end farther from the
model's rest value (``qpos0``) is open. The set-point goes to the actuator through its own affine law
(``ctrl = (k · gear · T(q) - b0) / g`` for transmission length ``T``), so a tendon actuator commanded in
0..255 and a joint servo commanded in metres map alike; the mapping is linear in ``a``.

Stroke: the leader's travel between the two ends (m or rad) and, when computable, the fingertip gap
at each end (m). Force: the actuator's force range, else the leader joint's effort limit (URDF).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import mujoco
import numpy as np

from embodied_ws.core.errors import ModelError
from embodied_ws.sim.gripper_geometry import close_loops, fingertip_gaps, follower_qpos, in_subtree

_OBJ = mujoco.mjtObj
_MOVABLE = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))
_JOINT_TRN = (int(mujoco.mjtTrn.mjTRN_JOINT), int(mujoco.mjtTrn.mjTRN_JOINTINPARENT))


@dataclass(frozen=True)
class Gripper:
    """One gripper found beyond an arm's wrist, and how an action in [-1, 1] drives it.

    :param leader: the joint the actuator drives ("" when none)
    :param joints: every movable joint of the gripper (leader, followers, linkage and passive joints)
    :param followers: joints that follow the leader (mimic / joint equality, or the actuated tendon)
    :param linkage: passive joints closed by a connect/weld equality (moved through the constraint)
    :param actuator: name of the actuator driving it ("" when none)
    :param actuator_id: its index in the model it was detected in (-1 when none)
    :param leader_id: the leader's joint id in that model (-1 when none)
    :param kind: ``slide`` (m) or ``hinge`` (rad), the leader's joint type
    :param closed: leader value at the closed end
    :param open: leader value at the open end
    :param ctrl_closed: actuator control at the closed end
    :param ctrl_open: actuator control at the open end
    :param gap_closed: fingertip gap (m) at the closed end, None when not computable
    :param gap_open: fingertip gap (m) at the open end, None when not computable
    :param force: the actuator's (or the leader joint's) force limit, N or N·m (None: unlimited)
    :param problem: why the toolkit cannot drive it (None: drivable)
    """

    leader: str
    joints: tuple[str, ...]
    followers: tuple[str, ...] = ()
    linkage: tuple[str, ...] = ()
    actuator: str = ""
    actuator_id: int = -1
    leader_id: int = -1
    kind: str = "slide"
    closed: float = 0.0
    open: float = 0.0
    ctrl_closed: float = 0.0
    ctrl_open: float = 0.0
    gap_closed: float | None = None
    gap_open: float | None = None
    force: float | None = None
    problem: str | None = None

    @property
    def stroke(self) -> float:
        """Leader travel between the closed and open ends (m or rad)."""
        return abs(self.open - self.closed)

    @property
    def drivable(self) -> bool:
        """Whether one normalised action can drive it."""
        return self.problem is None

    @property
    def ctrl_mid(self) -> float:
        """Actuator control at ``a = 0`` (half open)."""
        return (self.ctrl_open + self.ctrl_closed) / 2.0

    @property
    def ctrl_half(self) -> float:
        """Control change per unit of action (negative when the control closes as it grows)."""
        return (self.ctrl_open - self.ctrl_closed) / 2.0

    def set_point(self, action: float | np.ndarray) -> Any:
        """Leader set-point for ``action`` in [-1, 1] (-1 closed, +1 open; clipped)."""
        a = np.clip(action, -1.0, 1.0)
        return self.closed + (a + 1.0) / 2.0 * (self.open - self.closed)

    def ctrl(self, action: float | np.ndarray) -> Any:
        """Actuator control for ``action`` in [-1, 1] (-1 closed, +1 open; clipped)."""
        return self.ctrl_mid + self.ctrl_half * np.clip(action, -1.0, 1.0)

    def action(self, leader_q: float | np.ndarray) -> Any:
        """The action whose set-point is ``leader_q`` (clipped to [-1, 1]): holds the gripper where it is."""
        span = self.open - self.closed
        if span == 0:
            return np.zeros_like(np.asarray(leader_q, dtype=float))
        return np.clip(2.0 * (np.asarray(leader_q, dtype=float) - self.closed) / span - 1.0, -1.0, 1.0)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON (``robot show --json``), with ``stroke`` and ``drivable``."""
        out = asdict(self)
        for k in ("joints", "followers", "linkage"):
            out[k] = list(out[k])
        out["stroke"] = self.stroke
        out["drivable"] = self.drivable
        for k, v in out.items():
            if isinstance(v, float):
                out[k] = round(v, 6) + 0.0
        return out


# ----------------------------------------------------------------------------- structure
def _name(model: mujoco.MjModel, obj: mujoco.mjtObj, i: int) -> str:
    return mujoco.mj_id2name(model, obj, i) or f"{obj.name.removeprefix('mjOBJ_').lower()}{i}"


def _joint_eqs(model: mujoco.MjModel) -> list[tuple[int, int, int]]:
    """``(eq id, follower, leader)`` of every active joint-coupling equality."""
    out = []
    for e in range(model.neq):
        if int(model.eq_type[e]) == int(mujoco.mjtEq.mjEQ_JOINT) and model.eq_obj2id[e] >= 0 and model.eq_active0[e]:
            out.append((e, int(model.eq_obj1id[e]), int(model.eq_obj2id[e])))
    return out


def _tendon_joints(model: mujoco.MjModel, t: int) -> list[tuple[int, float]]:
    """``(joint, coef)`` of a fixed tendon (empty for a spatial tendon)."""
    adr, num = int(model.tendon_adr[t]), int(model.tendon_num[t])
    out = []
    for w in range(adr, adr + num):
        if int(model.wrap_type[w]) != int(mujoco.mjtWrap.mjWRAP_JOINT):
            return []
        out.append((int(model.wrap_objid[w]), float(model.wrap_prm[w])))
    return out


def _closed_loop_joints(model: mujoco.MjModel, joints: list[int]) -> set[int]:
    """Joints whose body's subtree holds a body of a connect/weld equality (a closed linkage)."""
    kinds = (int(mujoco.mjtEq.mjEQ_CONNECT), int(mujoco.mjtEq.mjEQ_WELD))
    bodies = set()
    for e in range(model.neq):
        if int(model.eq_type[e]) in kinds and int(model.eq_objtype[e]) == int(_OBJ.mjOBJ_BODY):
            bodies |= {int(model.eq_obj1id[e]), int(model.eq_obj2id[e])}
    return {j for j in joints if any(in_subtree(model, b, int(model.jnt_bodyid[j])) for b in bodies if b > 0)}


def _couplings(model: mujoco.MjModel, leader: int) -> dict[int, tuple[int, int]]:
    """Joints reached from ``leader`` through joint equalities: joint → (eq id, the joint it follows)."""
    eqs = _joint_eqs(model)
    reached: dict[int, tuple[int, int]] = {}
    frontier, seen = [leader], {leader}
    while frontier:
        j = frontier.pop()
        for e, f, lead in eqs:
            other = f if lead == j else lead if f == j else -1
            if other >= 0 and other not in seen:
                seen.add(other)
                reached[other] = (e, j)
                frontier.append(other)
    return reached


# ----------------------------------------------------------------------------- detection
def gripper_joints(model: mujoco.MjModel, arm: list[int]) -> list[int]:
    """Movable joints beyond the arm's last joint (its wrist body's subtree) that are not arm joints."""
    if not arm:
        return []
    wrist = int(model.jnt_bodyid[arm[-1]])
    arm_set = set(arm)
    return [
        j
        for j in range(model.njnt)
        if int(model.jnt_type[j]) in _MOVABLE
        and j not in arm_set
        and in_subtree(model, int(model.jnt_bodyid[j]), wrist)
    ]


def _actuators_on(model: mujoco.MjModel, joints: set[int]) -> list[tuple[int, int, list[tuple[int, float]]]]:
    """``(actuator, leader joint, tendon joints)`` of the actuators driving any of ``joints``."""
    out = []
    for a in range(model.nu):
        trn, tid = int(model.actuator_trntype[a]), int(model.actuator_trnid[a, 0])
        if trn in _JOINT_TRN and tid in joints:
            out.append((a, tid, []))
        elif trn == int(mujoco.mjtTrn.mjTRN_TENDON):
            tj = _tendon_joints(model, tid)
            if tj and any(j in joints for j, _ in tj):
                # the leader: the first tendon joint that follows no other tendon joint by a joint equality
                coupled = {f for _, f, lead in _joint_eqs(model) if lead in {t for t, _ in tj}}
                out.append((a, next((j for j, _ in tj if j not in coupled), tj[0][0]), tj))
    return out


def detect_grippers(model: mujoco.MjModel, arm: list[int]) -> list[Gripper]:
    """The gripper beyond the arm ``arm`` (joint ids, root first), as a list (empty: none).

    :param model: the robot's model with its own actuators (before any joint is held)
    :param arm: the arm joints (:func:`embodied_ws.sim.robot_defaults.arm_joints`)
    """
    joints = gripper_joints(model, arm)
    if not joints:
        return []
    names = tuple(_name(model, _OBJ.mjOBJ_JOINT, j) for j in joints)
    jset = set(joints)
    acts = _actuators_on(model, jset)
    if not acts:
        return [Gripper(leader="", joints=names, problem="no actuator drives them and none follows an actuated joint")]
    if len(acts) > 1:
        listed = ", ".join(_name(model, _OBJ.mjOBJ_ACTUATOR, a) for a, _, _ in acts)
        return [
            Gripper(
                leader="",
                joints=names,
                problem=f"{len(acts)} actuators drive them ({listed}); one open/close action needs one",
            )
        ]
    act, leader, tendon = acts[0]
    chain = {j: v for j, v in _couplings(model, leader).items() if j in jset}
    followers = [j for j in joints if j in chain or (j != leader and any(j == t for t, _ in tendon))]
    rest = [j for j in joints if j != leader and j not in followers]
    linkage = _closed_loop_joints(model, rest)
    base = dict(
        leader=_name(model, _OBJ.mjOBJ_JOINT, leader),
        joints=names,
        followers=tuple(_name(model, _OBJ.mjOBJ_JOINT, j) for j in followers),
        linkage=tuple(_name(model, _OBJ.mjOBJ_JOINT, j) for j in rest if j in linkage),
        actuator=_name(model, _OBJ.mjOBJ_ACTUATOR, act),
        actuator_id=act,
        leader_id=leader,
        kind="slide" if int(model.jnt_type[leader]) == int(mujoco.mjtJoint.mjJNT_SLIDE) else "hinge",
        force=_force(model, act, leader),
    )
    problem = _problem(model, act, leader, tendon, chain, [j for j in rest if j not in linkage])
    if problem is None and not model.jnt_limited[leader] and not model.actuator_ctrllimited[act]:
        problem = f"its leader {base['leader']} has no joint range and its actuator no control range"
    if problem is not None:
        return [Gripper(**base, problem=problem)]  # type: ignore[arg-type]
    return [_mapped(model, base, act, leader, tendon, chain, [j for j in rest if j in linkage])]


def _problem(
    model: mujoco.MjModel,
    act: int,
    leader: int,
    tendon: list[tuple[int, float]],
    chain: dict[int, tuple[int, int]],
    passive: list[int],
) -> str | None:
    aname = _name(model, _OBJ.mjOBJ_ACTUATOR, act)
    if passive:
        listed = ", ".join(_name(model, _OBJ.mjOBJ_JOINT, j) for j in passive)
        return f"joints {listed} have no actuator and follow no actuated joint"
    loose = [j for j, _ in tendon if j != leader and j not in chain]
    if loose:
        listed = ", ".join(_name(model, _OBJ.mjOBJ_JOINT, j) for j in loose)
        lead = _name(model, _OBJ.mjOBJ_JOINT, leader)
        return f"underactuated: tendon actuator {aname} pulls {listed} with no coupling to {lead}"
    affine = int(model.actuator_biastype[act]) == int(mujoco.mjtBias.mjBIAS_AFFINE)
    if not affine or model.actuator_biasprm[act, 1] >= 0 or model.actuator_gainprm[act, 0] == 0:
        return f"actuator {aname} is not a position actuator (no set-point to map an action to)"
    return None


def _force(model: mujoco.MjModel, act: int, leader: int) -> float | None:
    if model.actuator_forcelimited[act]:
        return float(np.max(np.abs(model.actuator_forcerange[act])))
    if model.jnt_actfrclimited[leader]:
        return float(np.max(np.abs(model.jnt_actfrcrange[leader])))
    return None


def _mapped(
    model: mujoco.MjModel,
    base: dict[str, Any],
    act: int,
    leader: int,
    tendon: list[tuple[int, float]],
    chain: dict[int, tuple[int, int]],
    linkage: list[int],
) -> Gripper:
    """Decide the open end and the control law for a drivable gripper."""
    g, b0, b1 = model.actuator_gainprm[act, 0], model.actuator_biasprm[act, 0], model.actuator_biasprm[act, 1]
    gear = float(model.actuator_gear[act, 0]) or 1.0

    def length(q: float) -> float:  # transmission length at leader value q
        if not tendon:
            return q
        vals = follower_qpos(model, leader, q, chain)
        return float(sum(c * vals.get(j, model.qpos0[model.jnt_qposadr[j]]) for j, c in tendon))

    def ctrl_of(q: float) -> float:
        return float((-b1 * gear * length(q) - b0) / g)

    def q_of(ctrl: float, lo: float, hi: float) -> float:  # invert the (linear) law between two ends
        c_lo, c_hi = ctrl_of(lo), ctrl_of(hi)
        return lo if c_hi == c_lo else lo + (ctrl - c_lo) / (c_hi - c_lo) * (hi - lo)

    if model.jnt_limited[leader]:
        lo, hi = (float(v) for v in model.jnt_range[leader])
    else:
        lo, hi = -1.0, 1.0
    if model.actuator_ctrllimited[act]:  # the actuator cannot command beyond its control range
        c0, c1 = sorted(float(v) for v in model.actuator_ctrlrange[act])
        ends = sorted((q_of(c0, lo, hi), q_of(c1, lo, hi)))
        lo, hi = (max(lo, ends[0]), min(hi, ends[1])) if model.jnt_limited[leader] else (ends[0], ends[1])
    gaps = fingertip_gaps(model, leader, chain, lo, hi, linkage)
    if gaps[0] is not None and gaps[1] is not None and abs(gaps[1] - gaps[0]) > 1e-9:
        open_hi = gaps[1] > gaps[0]
    else:  # no geometry to measure: the model rests closed
        rest = float(model.qpos0[model.jnt_qposadr[leader]])
        open_hi = abs(hi - rest) >= abs(lo - rest)
    closed, opened = (lo, hi) if open_hi else (hi, lo)
    gap_c, gap_o = (gaps[0], gaps[1]) if open_hi else (gaps[1], gaps[0])
    return Gripper(
        **base,
        closed=closed,
        open=opened,
        ctrl_closed=ctrl_of(closed),
        ctrl_open=ctrl_of(opened),
        gap_closed=gap_c,
        gap_open=gap_o,
    )


def place(model: mujoco.MjModel, qpos: np.ndarray, gripper: Gripper, action: float) -> np.ndarray:
    """``qpos`` with the gripper at ``action`` (-1 closed, +1 open): the leader at its set-point, followers
    where their joint equalities put them, linkage joints closing their loops (for resets and scripted
    grasps, so an episode does not start with the constraints pulling the fingers together).

    :param model: the model the gripper was detected in (or one with the same joints)
    :param qpos: a full configuration; a modified copy is returned
    :param gripper: a drivable gripper
    :param action: in [-1, 1]
    """
    leader = gripper.leader_id
    chain = _couplings(model, leader)
    data = mujoco.MjData(model)
    data.qpos[:] = qpos
    for j, v in follower_qpos(model, leader, float(gripper.set_point(action)), chain).items():
        data.qpos[model.jnt_qposadr[j]] = v
    linkage = [mujoco.mj_name2id(model, _OBJ.mjOBJ_JOINT, n) for n in gripper.linkage]
    close_loops(model, data, [j for j in linkage if j >= 0])
    return data.qpos.copy()


def require_drivable(grippers: list[Gripper], where: str) -> list[Gripper]:
    """The grippers when every one can be driven by one action; else one-line :class:`ModelError`
    naming the joints found (``task.gripper: action`` on a robot whose gripper the toolkit cannot drive).

    :param grippers: what :func:`detect_grippers` found
    :param where: the robot file, for the message
    """
    if not grippers:
        raise ModelError("task.gripper is action but no gripper joint was found beyond the arm's wrist", where)
    for g in grippers:
        if g.problem is not None:
            raise ModelError(
                f"task.gripper is action but its gripper ({', '.join(g.joints)}) cannot be driven: {g.problem}", where
            )
    return grippers


def binary_command(actions: np.ndarray) -> np.ndarray:
    """``task.gripper_command: binary``: gripper actions below 0 → -1 (fully closed), the rest → +1 (fully
    open); a not-finite action stays as it is (the deploy side holds the gripper on it, never opens it)."""
    a = np.asarray(actions, dtype=np.float64)
    return np.where(np.isfinite(a), np.where(a < 0.0, -1.0, 1.0), a)
