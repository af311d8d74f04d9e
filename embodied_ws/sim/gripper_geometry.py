"""Where a gripper's fingertips are at either end of its leader's range (used by :mod:`embodied_ws.sim.gripper`
to decide which end is open and to report the fingertip gap). Pure kinematics, no simulation: followers are
placed by their joint equalities, linkage joints so that the connect equalities closing them hold
(Gauss-Newton on those joints alone)."""

from __future__ import annotations

import mujoco
import numpy as np


def in_subtree(model: mujoco.MjModel, body: int, root: int) -> bool:
    """Whether ``body`` is ``root`` or hangs below it."""
    while body > 0:
        if body == root:
            return True
        body = int(model.body_parentid[body])
    return root == 0


def follower_qpos(model: mujoco.MjModel, leader: int, q: float, chain: dict[int, tuple[int, int]]) -> dict[int, float]:
    """Joint values that the joint equalities give every coupled joint when the leader is at ``q``.

    MuJoCo's joint equality: ``y - y0 = a0 + a1 (x - x0) + a2 (x - x0)² + ...`` (``y`` = joint1, ``x`` =
    joint2, ``0`` = qpos0); a coupling walked the other way is inverted for its linear part."""
    vals = {leader: q}
    pending = dict(chain)
    while pending:
        progressed = False
        for j, (e, via) in list(pending.items()):
            if via not in vals:
                continue
            coef = model.eq_data[e][:5]
            y0_j = model.qpos0[model.jnt_qposadr[j]]
            x0_via = model.qpos0[model.jnt_qposadr[via]]
            if int(model.eq_obj1id[e]) == j:  # j follows via
                dx = vals[via] - x0_via
                vals[j] = float(y0_j + sum(c * dx**k for k, c in enumerate(coef)))
            else:  # via follows j: invert the linear part
                dy = vals[via] - x0_via
                vals[j] = float(y0_j + (dy - coef[0]) / coef[1]) if coef[1] else float(y0_j)
            del pending[j]
            progressed = True
        if not progressed:
            break
    return vals


# ----------------------------------------------------------------------------- geometry
def _tip_geoms(model: mujoco.MjModel, roots: list[int], palm: int, data: mujoco.MjData) -> list[int]:
    """Per finger root body: the geom of its subtree farthest from the palm body (-1 when none)."""
    tips = []
    for r in roots:
        geoms = [g for g in range(model.ngeom) if in_subtree(model, int(model.geom_bodyid[g]), r)]
        if not geoms:
            tips.append(-1)
            continue
        d = [np.linalg.norm(data.geom_xpos[g] - data.xpos[palm]) for g in geoms]
        tips.append(geoms[int(np.argmax(d))])
    return tips


def _gaps(tips: list[int], palm_geoms: list[int], ends: list[np.ndarray]) -> tuple[float | None, float | None]:
    """Fingertip gap at the two ends (``ends``: ``geom_xpos`` at each). Two or more fingers: the pair of tips
    that separates most, its distance measured along the direction it separates in (a pad offset across
    that direction does not count); one jaw: its tip's distance to the nearest geom of the fixed jaw."""
    tips = [g for g in tips if g >= 0]
    if len(tips) >= 2:
        pairs = [(a, b) for i, a in enumerate(tips) for b in tips[i + 1 :]]
        moves = [(ends[1][a] - ends[1][b]) - (ends[0][a] - ends[0][b]) for a, b in pairs]
        k = int(np.argmax([np.linalg.norm(mv) for mv in moves]))
        norm = float(np.linalg.norm(moves[k]))
        a, b = pairs[k]
        if norm < 1e-12:
            d = float(np.linalg.norm(ends[0][a] - ends[0][b]))
            return d, d
        u = moves[k] / norm
        return tuple(abs(float(np.dot(x[a] - x[b], u))) for x in ends)  # type: ignore[return-value]
    if len(tips) == 1 and palm_geoms:
        g = tips[0]
        return tuple(float(min(np.linalg.norm(x[g] - x[p]) for p in palm_geoms)) for x in ends)  # type: ignore[return-value]
    return None, None


def _pose(model: mujoco.MjModel, data: mujoco.MjData, vals: dict[int, float], linkage: list[int]) -> None:
    data.qpos[:] = model.qpos0
    for j, v in vals.items():
        data.qpos[model.jnt_qposadr[j]] = v
    close_loops(model, data, linkage)


def _loop_residual(model: mujoco.MjModel, data: mujoco.MjData, eqs: list[int]) -> np.ndarray:
    mujoco.mj_kinematics(model, data)
    out = []
    for e in eqs:
        b1, b2 = int(model.eq_obj1id[e]), int(model.eq_obj2id[e])
        p1 = data.xpos[b1] + data.xmat[b1].reshape(3, 3) @ model.eq_data[e][0:3]
        p2 = data.xpos[b2] + data.xmat[b2].reshape(3, 3) @ model.eq_data[e][3:6]
        out.append(p1 - p2)
    return np.concatenate(out)


def close_loops(model: mujoco.MjModel, data: mujoco.MjData, joints: list[int], iters: int = 50) -> float:
    """Move ``joints`` (a linkage's passive joints) until the model's connect equalities hold, the other
    joints fixed (Gauss-Newton, finite-difference Jacobian, joint limits respected); kinematics updated.

    :returns: the remaining constraint violation (m)
    """
    eqs = [
        e
        for e in range(model.neq)
        if int(model.eq_type[e]) == int(mujoco.mjtEq.mjEQ_CONNECT)
        and int(model.eq_objtype[e]) == int(mujoco.mjtObj.mjOBJ_BODY)
        and model.eq_active0[e]
    ]
    if not eqs or not joints:
        mujoco.mj_kinematics(model, data)
        return 0.0
    adr = model.jnt_qposadr[joints]
    limited = model.jnt_limited[joints].astype(bool)
    lo, hi = model.jnt_range[joints, 0], model.jnt_range[joints, 1]
    r = _loop_residual(model, data, eqs)
    for _ in range(iters):
        if np.linalg.norm(r) < 1e-9:
            break
        jac = np.empty((r.size, len(joints)))
        for k, a in enumerate(adr):
            data.qpos[a] += 1e-7
            jac[:, k] = (_loop_residual(model, data, eqs) - r) / 1e-7
            data.qpos[a] -= 1e-7
        q = data.qpos[adr] + np.linalg.lstsq(jac, -r, rcond=None)[0]
        data.qpos[adr] = np.where(limited, np.clip(q, lo, hi), q)
        r = _loop_residual(model, data, eqs)
    return float(np.linalg.norm(r))


def fingertip_gaps(
    model: mujoco.MjModel,
    leader: int,
    chain: dict[int, tuple[int, int]],
    lo: float,
    hi: float,
    linkage: list[int] | None = None,
) -> tuple[float | None, float | None]:
    """Fingertip gap (m) with the leader at ``lo`` and at ``hi`` (None where no geom allows the measure).

    Fingers are the subtrees of the gripper joints that hang below no other gripper joint; a finger's tip
    is its geom farthest from the palm (the leader's parent body) at ``lo``; with one moving jaw, the gap
    is measured to the nearest geom of the palm (the fixed jaw).

    :param model: the robot's model
    :param leader: the leader joint
    :param chain: the joints coupled to the leader (:func:`embodied_ws.sim.gripper` couplings)
    :param lo: the leader's lower end
    :param hi: the leader's upper end
    :param linkage: passive joints closed by connect equalities (placed so the loops close)
    """
    data = mujoco.MjData(model)
    palm = int(model.body_parentid[model.jnt_bodyid[leader]])
    linkage = list(linkage or [])
    finger_joints = [leader, *chain, *linkage]
    roots = sorted(
        {
            int(model.jnt_bodyid[j])
            for j in finger_joints
            if not any(
                in_subtree(model, int(model.body_parentid[model.jnt_bodyid[j]]), int(model.jnt_bodyid[k]))
                for k in finger_joints
                if k != j
            )
        }
    )
    _pose(model, data, follower_qpos(model, leader, lo, chain), linkage)
    tips = _tip_geoms(model, roots, palm, data)
    palm_geoms = [gi for gi in range(model.ngeom) if int(model.geom_bodyid[gi]) == palm]
    ends = []
    for q in (lo, hi):
        _pose(model, data, follower_qpos(model, leader, q, chain), linkage)
        ends.append(data.geom_xpos.copy())
    return _gaps(tips, palm_geoms, ends)
