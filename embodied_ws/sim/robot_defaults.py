"""Sensible defaults read from any arm model, so a new robot trains ``reach`` without per-robot code.

Rules (each a function below, all deterministic):

- **arm and tool**: from the world, follow the kinematic tree while exactly one child branch carries
  movable joints; stop at a branch point (a hand with several fingers) or before a joint named like a
  gripper joint (finger, gripper, jaw ...). The body reached is the *hand*, the last body with a
  joint on the way the *wrist*. The end effector is the best tool frame rigidly attached to the wrist
  (bodies or sites named tcp, tool, ee, end_effector, grasp or pinch, attachment, flange, tip, in that order;
  the deepest of equal rank), else the hand itself — never a finger.
  The arm joints are the movable joints on the path from the world to the end effector.
- **held joints**: movable joints that are not arm joints (fingers, grippers) are held at their home
  value by a joint equality and lose their actuators: the policy commands the arm only. With
  ``task.gripper: action`` the gripper's joints and its one actuator are kept instead
  (:mod:`embodied_ws.sim.gripper` finds them from the structure, not from names).
- **home pose** (when the model has no ``home`` keyframe): among the mid-range pose, ``qpos0`` and
  512 seeded samples from the central 70 % of every joint range, the pose whose end effector is above
  the base with the largest ``manipulability × margin`` (manipulability = √det(J Jᵀ) of the position
  Jacobian, margin = the smallest distance to a joint limit as a fraction of that joint's range).
- **servos** (URDF robots): one position servo per commanded joint with ``kp = I ω²`` and
  ``kv = 2 I ω`` (critically damped), ``I`` = the joint-space inertia the joint sees at the home pose
  (``M[d, d]`` from the link inertias, MuJoCo's composite-rigid-body result) and ``ω = 2π · 10 Hz``;
  control range = joint limits, force range = the URDF effort limit. Bodies get gravity compensation,
  as the drives of a position-controlled arm hold it against gravity. Mimic couplings (and the
  locks of held joints) are as stiff as the timestep allows (``solref`` time constant 2·timestep).
- **action scale**: in ``delta`` mode the set-point of joint ``j`` moves at most
  ``v_j · control_dt`` per control step (``v_j`` = its velocity limit, when the model states one).
  A model that states no velocity limit (a hand-written MJCF) instead gets one bound on the speed all
  joints together can command at the end effector at the home pose: ``Σ_j |J_j| · Δq_j ≤
  env.ee_speed_limit · control_dt`` (``|J_j|`` = the joint's lever arm, the norm of its column of the
  end-effector position Jacobian); the per-joint steps shrink by one common factor when the sum is over.
  (Measured alternative: one joint-speed cap shared by all joints, which matches datasheet velocity limits
  better, learned slower on the Menagerie Panda: 0.75 vs 0.85 evaluation success after 1.4 M steps.)
  The default 5.5 m/s is what arm3 has at ``delta_scale`` 0.1 (5.4 m/s), within what URDF arms get
  from their stated velocity limits (Panda 6.3, UR5 6.8, xArm7 7.1 m/s): without it, a 7-DoF arm with ±2.9 rad
  joints commands 16 m/s and learns fine positioning far slower.
- **physics copies**: ``reach`` is free-space motion, so the per-env model copies (the ones domain
  randomization writes) carry no geoms, meshes or contacts: body inertias are made explicit first,
  so the dynamics are those of the full model, which renders.
"""

from __future__ import annotations

import re

import mujoco
import numpy as np

_OBJ = mujoco.mjtObj
MOVABLE = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))
GRIPPER_JOINT = re.compile(r"finger|gripper|jaw|claw|knuckle|thumb|grip", re.IGNORECASE)
TOOL_NAMES = (r"tcp", r"tool", r"(^|_)ee($|_)|end_?effector|eef", r"grasp|pinch", r"attachment", r"flange", r"tip")
SERVO_HZ = 10.0
VELOCITY_PREFIX = "velocity_limit:"


def _name(model: mujoco.MjModel, obj: mujoco.mjtObj, i: int) -> str:
    return mujoco.mj_id2name(model, obj, i) or ""


def _children(model: mujoco.MjModel) -> list[list[int]]:
    kids: list[list[int]] = [[] for _ in range(model.nbody)]
    for b in range(1, model.nbody):
        kids[int(model.body_parentid[b])].append(b)
    return kids


def _movable(model: mujoco.MjModel, body: int) -> list[int]:
    first, count = int(model.body_jntadr[body]), int(model.body_jntnum[body])
    return [j for j in range(first, first + count) if int(model.jnt_type[j]) in MOVABLE] if count else []


def find_hand(model: mujoco.MjModel) -> tuple[int, int]:
    """``(hand, wrist)``: the body where the arm ends and the last body on the way with a movable joint
    (see the module rules); ``(0, 0)`` when the model has no movable joint."""
    kids = _children(model)
    dofs = np.zeros(model.nbody, dtype=np.int64)
    for b in range(model.nbody - 1, 0, -1):  # children have larger ids than their parents
        dofs[b] += len(_movable(model, b))
        dofs[int(model.body_parentid[b])] += dofs[b]
    body = wrist = 0
    while True:
        branches = [c for c in kids[body] if dofs[c] > 0 and model.body_mocapid[c] < 0]
        if len(branches) != 1:
            return body, wrist
        nxt = branches[0]
        joints = _movable(model, nxt)
        if wrist and joints and all(GRIPPER_JOINT.search(_name(model, _OBJ.mjOBJ_JOINT, j)) for j in joints):
            return body, wrist
        body = nxt
        wrist = nxt if joints else wrist


def detect_ee(model: mujoco.MjModel) -> str:
    """Name of the end-effector frame: a tool frame rigidly attached to the wrist, or the hand body
    (never a finger); empty when the model has no movable joint."""
    hand, wrist = find_hand(model)
    if wrist == 0:
        return ""
    kids = _children(model)
    frames: list[tuple[str, int]] = []  # (name, depth) of bodies and sites rigidly attached to the wrist
    stack = [(wrist, 0)]
    while stack:
        b, depth = stack.pop()
        frames.append((_name(model, _OBJ.mjOBJ_BODY, b), depth))
        frames += [(_name(model, _OBJ.mjOBJ_SITE, s), depth) for s in range(model.nsite) if model.site_bodyid[s] == b]
        stack += [(c, depth + 1) for c in kids[b] if not _movable(model, c)]
    for pattern in TOOL_NAMES:
        hits = [(d, n) for n, d in frames if n and re.search(pattern, n, re.IGNORECASE)]
        if hits:
            return max(hits)[1]  # the deepest match: a TCP beyond the flange
    return _name(model, _OBJ.mjOBJ_BODY, hand) or _name(model, _OBJ.mjOBJ_BODY, wrist)


def frame_body(model: mujoco.MjModel, name: str) -> int:
    """Body id of a body or site named ``name`` (-1 when there is none)."""
    sid = mujoco.mj_name2id(model, _OBJ.mjOBJ_SITE, name)
    if sid >= 0:
        return int(model.site_bodyid[sid])
    return int(mujoco.mj_name2id(model, _OBJ.mjOBJ_BODY, name))


def arm_joints(model: mujoco.MjModel, ee: str) -> list[int]:
    """Movable joints on the path from the world to the end effector, root first."""
    body, out = frame_body(model, ee), []
    while body > 0:
        out = _movable(model, body) + out
        body = int(model.body_parentid[body])
    return out


def followers(model: mujoco.MjModel) -> set[int]:
    """Joints driven by another joint through a joint equality (URDF mimic joints)."""
    eq = mujoco.mjtEq.mjEQ_JOINT
    return {int(model.eq_obj1id[e]) for e in range(model.neq) if model.eq_type[e] == eq and model.eq_obj2id[e] >= 0}


# A continuous (unlimited) joint is commanded within two turns, not one: from any angle within a turn of the
# middle, the shorter way to any other angle stays inside the range. With ±π, a target just across ±π sat
# behind a wall: a Kinova Jaco2 (continuous base) got stuck there, the shorter way blocked by the limit.
CONTINUOUS_HALF_RANGE = 2.0 * np.pi


def joint_ranges(model: mujoco.MjModel, joints: list[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper limits (±:data:`CONTINUOUS_HALF_RANGE` for unlimited joints)."""
    rng = model.jnt_range[joints].copy()
    rng[~model.jnt_limited[joints].astype(bool)] = [-CONTINUOUS_HALF_RANGE, CONTINUOUS_HALF_RANGE]
    return rng[:, 0], rng[:, 1]


def home_pose(model: mujoco.MjModel, arm: list[int], ee: str, samples: int = 512, seed: int = 0) -> np.ndarray:
    """A home ``qpos`` away from joint limits and singularities (rule in the module docstring)."""
    data = mujoco.MjData(model)
    lo, hi = joint_ranges(model, arm)
    span = hi - lo
    adr = model.jnt_qposadr[arm]
    dofs = model.jnt_dofadr[arm]
    body = frame_body(model, ee)
    sid = mujoco.mj_name2id(model, _OBJ.mjOBJ_SITE, ee)
    rng = np.random.default_rng(seed)
    base = rest_pose(model)
    cands = [(lo + hi) / 2, np.clip(model.qpos0[adr], lo, hi)]
    cands += list(rng.uniform(lo + 0.15 * span, hi - 0.15 * span, (samples, len(arm))))
    base_z = _arm_base_z(model, arm, data, base)
    jacp = np.zeros((3, model.nv))
    best, best_score = cands[0], -np.inf
    for q in cands:
        data.qpos[:] = base
        data.qpos[adr] = q
        mujoco.mj_kinematics(model, data)
        mujoco.mj_comPos(model, data)
        if sid >= 0:
            pos = data.site_xpos[sid]
            mujoco.mj_jacSite(model, data, jacp, None, sid)
        else:
            pos = data.xpos[body]
            mujoco.mj_jacBody(model, data, jacp, None, body)
        j = jacp[:, dofs]
        manip = float(np.sqrt(max(np.linalg.det(j @ j.T), 0.0)))
        margin = float(np.min(np.minimum(q - lo, hi - q) / span))
        score = manip * margin + (0.0 if pos[2] > base_z else -1.0)
        if score > best_score:
            best, best_score = q, score
    out = base.copy()
    out[adr] = best
    return out


def rest_pose(model: mujoco.MjModel) -> np.ndarray:
    """The rest configuration: ``qpos0`` with every limited joint moved into its range (nearest 0)."""
    q = model.qpos0.copy()
    for j in range(model.njnt):
        if int(model.jnt_type[j]) in MOVABLE and model.jnt_limited[j]:
            a = model.jnt_qposadr[j]
            q[a] = np.clip(0.0, *model.jnt_range[j])
    return q


def _arm_base_z(model: mujoco.MjModel, arm: list[int], data: mujoco.MjData, qpos: np.ndarray) -> float:
    data.qpos[:] = qpos
    mujoco.mj_kinematics(model, data)
    return float(data.xanchor[arm[0]][2]) if arm else 0.0


def servo_gains(model: mujoco.MjModel, joints: list[int], qpos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(kp, kv)`` per joint: ``I ω²`` and ``2 I ω`` with ``I = M[d, d]`` at ``qpos`` (rule above)."""
    data = mujoco.MjData(model)
    data.qpos[:] = qpos
    mujoco.mj_forward(model, data)
    full = np.zeros((model.nv, model.nv))
    mujoco.mj_fullM(model, data, full)
    inertia = np.maximum(np.diag(full)[model.jnt_dofadr[joints]], 1e-6)
    omega = 2.0 * np.pi * SERVO_HZ
    return inertia * omega**2, 2.0 * inertia * omega


def add_servos(
    spec: mujoco.MjSpec, model: mujoco.MjModel, joints: list[int], qpos: np.ndarray, velocity: dict[str, float]
) -> None:
    """Position servos on ``joints`` (rule above), gravity compensation, velocity limits as numerics."""
    kp, kv = servo_gains(model, joints, qpos)
    lo, hi = joint_ranges(model, joints)
    for k, j in enumerate(joints):
        name = _name(model, _OBJ.mjOBJ_JOINT, j)
        act = spec.add_actuator(name=name, target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
        act.set_to_position(kp=float(kp[k]), kv=float(kv[k]))
        act.ctrlrange = [float(lo[k]), float(hi[k])]
        act.ctrllimited = 1
        effort = float(model.jnt_actfrcrange[j][1]) if model.jnt_actfrclimited[j] else 0.0
        if effort > 0:
            act.forcerange = [-effort, effort]
            act.forcelimited = 1
        if name in velocity and velocity[name] > 0:
            spec.add_numeric(name=VELOCITY_PREFIX + name, data=[float(velocity[name])])
    for body in spec.bodies:
        if body.name != "world":
            body.gravcomp = 1.0
    for eq in spec.equalities:  # mimic couplings: as stiff as the timestep allows
        if eq.type == mujoco.mjtEq.mjEQ_JOINT:
            eq.solref = [2.0 * float(model.opt.timestep), 1.0]
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST


def set_home_key(spec: mujoco.MjSpec, model: mujoco.MjModel, qpos: np.ndarray) -> None:
    """Add (or replace) the ``home`` keyframe: ``qpos`` and servo set-points at it."""
    for key in list(spec.keys):
        if key.name == "home":
            spec.delete(key)
    ctrl = []
    for a in range(model.nu):
        j = int(model.actuator_trnid[a, 0])
        ok = int(model.actuator_trntype[a]) == int(mujoco.mjtTrn.mjTRN_JOINT) and j >= 0
        ctrl.append(float(qpos[model.jnt_qposadr[j]]) if ok and model.actuator_biastype[a] else 0.0)
    spec.add_key(name="home", qpos=qpos.tolist(), ctrl=ctrl)


def kept_actuators(
    model: mujoco.MjModel, keep: list[int], keep_actuators: set[int] | frozenset[int] = frozenset()
) -> list[int]:
    """Actuators :func:`hold_joints` keeps, in model order: joint actuators on a joint in ``keep``, and
    ``keep_actuators`` (a gripper's tendon actuator when ``task.gripper: action``)."""
    keep_set = set(keep)
    out = []
    for a in range(model.nu):
        trn = int(model.actuator_trntype[a])
        joint_trn = trn in (int(mujoco.mjtTrn.mjTRN_JOINT), int(mujoco.mjtTrn.mjTRN_JOINTINPARENT))
        if (joint_trn and int(model.actuator_trnid[a, 0]) in keep_set) or a in keep_actuators:
            out.append(a)
    return out


def hold_joints(
    spec: mujoco.MjSpec,
    model: mujoco.MjModel,
    keep: list[int],
    qpos: np.ndarray,
    keep_actuators: set[int] | frozenset[int] = frozenset(),
) -> list[str]:
    """Lock every movable joint not in ``keep`` at its ``qpos`` value and delete the actuators
    :func:`kept_actuators` does not keep. Returns the held joint names."""
    keep_set = set(keep)
    driven = followers(model)
    held = []
    for j in range(model.njnt):
        if int(model.jnt_type[j]) not in MOVABLE or j in keep_set:
            continue
        name = _name(model, _OBJ.mjOBJ_JOINT, j)
        if not name:
            continue
        held.append(name)
        if j not in driven:
            value = float(qpos[model.jnt_qposadr[j]])
            lock = spec.add_equality(type=mujoco.mjtEq.mjEQ_JOINT, name1=name)
            coef = np.zeros(len(lock.data))  # q = value (polynomial with only a constant term)
            coef[0] = value
            lock.data = coef.tolist()
            lock.solref = [2.0 * float(model.opt.timestep), 1.0]  # as stiff as the timestep allows
    kept_ctrl = kept_actuators(model, keep, keep_actuators)
    if len(kept_ctrl) < model.nu:
        victims = [spec.actuators[a] for a in range(model.nu) if a not in kept_ctrl]
        for act in victims:  # before touching the keyframes: MjSpec ignores deletes after a key edit
            spec.delete(act)
        for key in spec.keys:
            if len(key.ctrl) == model.nu:
                key.ctrl = [key.ctrl[a] for a in kept_ctrl]
    return held


def position_servos(model: mujoco.MjModel) -> np.ndarray:
    """Which actuators are position servos (affine bias ``-kp · q``): their command is a joint position."""
    return (model.actuator_biastype == mujoco.mjtBias.mjBIAS_AFFINE) & np.isclose(
        model.actuator_biasprm[:, 1], -model.actuator_gainprm[:, 0]
    )


def ee_levers(model: mujoco.MjModel, qpos: np.ndarray, ee_sensor: int, dofs: np.ndarray) -> np.ndarray:
    """Lever arm (m per rad, or m per m for a slide) of each dof in ``dofs`` at the end effector in pose ``qpos``:
    the norm of its column of the position Jacobian of the frame the ``ee_sensor`` (a framepos sensor) reads."""
    data = mujoco.MjData(model)
    data.qpos[:] = qpos
    mujoco.mj_kinematics(model, data)
    mujoco.mj_comPos(model, data)
    jac = np.zeros((3, model.nv))
    obj = int(model.sensor_objid[ee_sensor])
    if int(model.sensor_objtype[ee_sensor]) == int(_OBJ.mjOBJ_SITE):
        mujoco.mj_jacSite(model, data, jac, None, obj)
    else:
        mujoco.mj_jacBody(model, data, jac, None, obj)
    return np.linalg.norm(jac[:, dofs], axis=0)


def velocity_limits(model: mujoco.MjModel, joints: list[int]) -> np.ndarray:
    """Velocity limit per joint from the model's ``velocity_limit:<joint>`` numerics (NaN: unknown)."""
    out = np.full(len(joints), np.nan)
    for k, j in enumerate(joints):
        nid = mujoco.mj_name2id(model, _OBJ.mjOBJ_NUMERIC, VELOCITY_PREFIX + _name(model, _OBJ.mjOBJ_JOINT, j))
        if nid >= 0:
            out[k] = float(model.numeric_data[model.numeric_adr[nid]])
    return out


def physics_model(spec: mujoco.MjSpec, model: mujoco.MjModel) -> mujoco.MjModel | None:
    """A copy of ``model`` without geoms, meshes, textures or contacts (same dynamics), or None when the
    model cannot be stripped safely (unnamed bodies, different sizes after stripping)."""
    lean = spec.copy()
    bodies = {b.name: b for b in lean.bodies if b.name}
    if len(bodies) != model.nbody:
        return None
    for i in range(1, model.nbody):
        b = bodies.get(_name(model, _OBJ.mjOBJ_BODY, i))
        if b is None:
            return None
        b.explicitinertial = True
        b.mass = float(model.body_mass[i])
        b.ipos = model.body_ipos[i].tolist()
        b.iquat = model.body_iquat[i].tolist()
        b.inertia = np.maximum(model.body_inertia[i], 0.0).tolist()
        b.fullinertia = [np.nan] * 6
    for kind in ("pairs", "geoms", "meshes", "skins", "hfields", "flexes"):
        for item in list(getattr(lean, kind)):
            lean.delete(item)
    for site in lean.sites:
        site.material = ""
    for kind in ("materials", "textures"):
        for item in list(getattr(lean, kind)):
            lean.delete(item)
    lean.option.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
    try:
        out = lean.compile()
    except Exception:  # something referenced a deleted element: keep the full model
        return None
    same = (out.nq, out.nv, out.nu, out.nsensordata, out.nbody) == (
        model.nq,
        model.nv,
        model.nu,
        model.nsensordata,
        model.nbody,
    )
    return out if same else None
