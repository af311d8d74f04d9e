"""What the arm can actually do, measured in simulation: joint speeds, step settling, servo overshoot.

A model declares joint ranges and (sometimes) velocity limits; what its joints reach depends on
everything else too — actuator force range, joint damping and armature, gravity and its compensation,
servo gains. A heavily damped joint whose force limit over its damping is under 1 rad/s cannot follow
set-points that move at a 2 rad/s declared limit, and a policy trained on it learns to chase a lagging
arm. So, per position-servo actuator, from the home pose with every other servo holding home:

- **speed**: the set-point jumps to the joint's far limit (a saturated command) and the peak joint
  speed over :data:`SPEED_WINDOW_S` is recorded;
- **step response**: the set-point steps by :data:`STEP_FRACTION` of the joint range (at most
  :data:`MAX_STEP_RAD`, and small enough that a force-limited servo stays below its limit) towards the side
  with room; the *settling time* is when the joint enters and
  stays within :data:`SETTLE_BAND` of where it ends, the *overshoot* how far past that it went, as a
  fraction of the move. A servo overshooting more than :data:`UNDERDAMPED_OVERSHOOT` is *underdamped*
  (a position servo with ``kv = 0`` on a lightly damped joint rings).

It simulates the lean physics copy (no contacts: the arm does not hit itself or the floor on the way)
and costs well under a second for a 7-DoF arm; results are cached per model (hash of the compiled
model) under ``$XDG_CACHE_HOME/embodied_ws/dynamics`` (default ``~/.cache``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

from embodied_ws.sim import robot_defaults as rd

#: seconds the arm holds its home set-points before each measurement (it may sag or still ring)
REST_S = 1.0
#: seconds the saturated command runs for the speed measurement
SPEED_WINDOW_S = 1.0
#: step size as a fraction of the joint range, and its cap in radians (metres for a slide joint)
STEP_FRACTION = 0.1
MAX_STEP_RAD = 0.2
#: a force-limited servo's step is at most this share of its force limit over kp (the linear regime)
LINEAR_FORCE_SHARE = 0.5
#: seconds the step response is simulated
STEP_WINDOW_S = 2.0
#: the band around the target that counts as settled, as a fraction of the step
SETTLE_BAND = 0.05
#: overshoot (fraction of the step) above which a servo is reported as underdamped
UNDERDAMPED_OVERSHOOT = 0.2
#: relative margin within which a set-point speed counts as reaching the joint's measured speed
#: (:meth:`DynamicsProbe.lagging`: the delta step is capped at exactly the measured speed)
LAG_TOLERANCE = 1e-6
#: bump when the measurement changes, so old cache entries are not reused
PROBE_VERSION = 1


@dataclass
class JointDynamics:
    """One actuated joint's measured dynamics (NaN where not measured: not a position servo)."""

    joint: str
    declared_speed: float  # the model's velocity limit (NaN: none stated)
    measured_speed: float  # peak speed under a saturated command, rad/s (m/s for a slide)
    settle_s: float  # settling time of a step (inf: never settled within the window)
    overshoot: float  # past the target, as a fraction of the step

    @property
    def underdamped(self) -> bool:
        """The servo rings: overshoot above :data:`UNDERDAMPED_OVERSHOOT`."""
        return bool(np.isfinite(self.overshoot) and self.overshoot > UNDERDAMPED_OVERSHOOT)


@dataclass
class DynamicsProbe:
    """Per-actuator measured dynamics of a robot (in actuator order)."""

    joints: list[JointDynamics]
    model_hash: str

    def measured_speeds(self) -> np.ndarray:
        """Measured joint speed per actuator (NaN: not measured)."""
        return np.array([j.measured_speed for j in self.joints], dtype=float)

    def lagging(self, setpoint_speed: np.ndarray) -> np.ndarray:
        """``(nu,)`` bool: the joints that cannot follow set-points moving at ``setpoint_speed`` (per actuator,
        rad/s or m/s; ``inf``: unbounded, never lagging): the set-point moves as fast as the joint's measured
        speed or faster, so the joint's own speed, not the set-point, decides how long a move takes."""
        v = self.measured_speeds()
        s = np.asarray(setpoint_speed, dtype=float)
        if s.shape != v.shape:
            return np.zeros(v.shape, dtype=bool)
        return np.isfinite(v) & np.isfinite(s) & (v <= s * (1.0 + LAG_TOLERANCE))

    def settle_time(self, joints: np.ndarray | None = None) -> float:
        """The slowest measured step settling time (s) among ``joints`` (a ``(nu,)`` mask; None: all) that
        settle; 0 when none was measured."""
        t = np.array([j.settle_s for j in self.joints], dtype=float)
        if joints is not None:
            t = t[np.asarray(joints, dtype=bool)]
        t = t[np.isfinite(t)]
        return float(t.max()) if t.size else 0.0

    def underdamped(self) -> list[str]:
        """Joints whose servos overshoot (ring)."""
        return [j.joint for j in self.joints if j.underdamped]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``robot show --json``, the cache)."""
        out = []
        for j in self.joints:
            row = asdict(j)
            row["underdamped"] = j.underdamped
            out.append({k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in row.items()})
        return {"model_hash": self.model_hash, "joints": out}


def model_hash(model: mujoco.MjModel) -> str:
    """SHA-256 of the compiled model (its binary MJB form) and the probe version."""
    buf = np.empty(mujoco.mj_sizeModel(model), dtype=np.uint8)
    mujoco.mj_saveModel(model, None, buf)
    return hashlib.sha256(buf.tobytes() + f"probe{PROBE_VERSION}".encode()).hexdigest()[:24]


def _home_ctrl(model: mujoco.MjModel, home: np.ndarray, servo: np.ndarray) -> np.ndarray:
    ctrl = np.zeros(model.nu)
    for a in range(model.nu):
        if servo[a]:
            ctrl[a] = home[model.jnt_qposadr[int(model.actuator_trnid[a, 0])]]
    return np.clip(ctrl, model.actuator_ctrlrange[:, 0], model.actuator_ctrlrange[:, 1]) if model.nu else ctrl


def _rest_state(model: mujoco.MjModel, home: np.ndarray, ctrl: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(qpos, qvel)`` after :data:`REST_S` seconds of holding ``ctrl`` from ``home``: a home pose that is
    no equilibrium (gravity without compensation) has sagged, so what follows measures the servo."""
    data = mujoco.MjData(model)
    data.qpos[:] = home
    data.ctrl[:] = ctrl
    mujoco.mj_step(model, data, nstep=max(1, round(REST_S / model.opt.timestep)))
    return data.qpos.copy(), data.qvel.copy()


def _run(model: mujoco.MjModel, start: tuple, ctrl: np.ndarray, seconds: float, qadr: int, dadr: int) -> tuple:
    data = mujoco.MjData(model)
    data.qpos[:], data.qvel[:] = start
    data.ctrl[:] = ctrl
    mujoco.mj_forward(model, data)
    n = max(1, round(seconds / model.opt.timestep))
    q, v = np.empty(n), np.empty(n)
    for k in range(n):
        mujoco.mj_step(model, data)
        q[k], v[k] = data.qpos[qadr], data.qvel[dadr]
    return q, v


@dataclass
class _Baseline:
    """What every actuator's measurement starts from, computed once per model: the home set-points, the state
    after resting on them, and every joint's trajectory when nothing is stepped (the arm's own drift)."""

    base: np.ndarray
    start: tuple[np.ndarray, np.ndarray]
    held: np.ndarray  # (steps, nq)

    @classmethod
    def of(cls, model: mujoco.MjModel, home: np.ndarray) -> _Baseline:
        base = _home_ctrl(model, home, rd.position_servos(model))
        start = _rest_state(model, home, base)
        data = mujoco.MjData(model)
        data.qpos[:], data.qvel[:] = start
        data.ctrl[:] = base
        mujoco.mj_forward(model, data)
        held = np.empty((max(1, round(STEP_WINDOW_S / model.opt.timestep)), model.nq))
        for k in range(len(held)):
            mujoco.mj_step(model, data)
            held[k] = data.qpos
        return cls(base, start, held)


def probe_actuator(
    model: mujoco.MjModel, home: np.ndarray, actuator: int, lo: float, hi: float, baseline: _Baseline | None = None
) -> tuple[float, float, float]:
    """``(measured_speed, settle_s, overshoot)`` of one position servo between joint limits ``lo``..``hi``
    (``baseline``: :class:`_Baseline` of ``model`` at ``home``, computed here when not given)."""
    baseline = baseline or _Baseline.of(model, home)
    base, start = baseline.base, baseline.start
    joint = int(model.actuator_trnid[actuator, 0])
    qadr, dadr = int(model.jnt_qposadr[joint]), int(model.jnt_dofadr[joint])
    q0 = float(start[0][qadr])
    clo, chi = model.actuator_ctrlrange[actuator] if model.actuator_ctrllimited[actuator] else (lo, hi)
    lo, hi = max(lo, float(clo)), min(hi, float(chi))
    far = lo if q0 - lo > hi - q0 else hi
    ctrl = base.copy()
    ctrl[actuator] = far
    _, vel = _run(model, start, ctrl, SPEED_WINDOW_S, qadr, dadr)
    speed = float(np.max(np.abs(vel)))
    step = min(STEP_FRACTION * (hi - lo), MAX_STEP_RAD)
    kp = float(model.actuator_gainprm[actuator, 0])
    if model.actuator_forcelimited[actuator] and kp > 0:
        # small enough that the servo's force stays below its limit: the linear response (a saturated
        # step overshoots on any servo whose braking force is capped too, which says nothing about damping)
        step = min(step, LINEAR_FORCE_SHARE * float(np.max(np.abs(model.actuator_forcerange[actuator]))) / kp)
    sign = 1.0 if hi - q0 >= q0 - lo else -1.0
    ctrl = base.copy()
    ctrl[actuator] = float(base[actuator]) + sign * step
    stepped, _ = _run(model, start, ctrl, STEP_WINDOW_S, qadr, dadr)
    # the step's own response: what the arm does anyway (still settling) taken out
    pos = stepped - baseline.held[:, qadr]
    # measured against where the joint ends (gravity or a coupling may hold it off the target), as is usual
    # for step responses; against the target when it barely moved (a joint that cannot follow at all)
    final = float(np.mean(pos[-max(1, len(pos) // 10) :]))
    reference = final if sign * final > 0.2 * step else sign * step
    progress = pos / reference  # 0 at the start, 1 where it ends
    overshoot = max(0.0, float(np.max(progress)) - 1.0)
    outside = np.flatnonzero(np.abs(progress - 1.0) > SETTLE_BAND)
    if outside.size == 0:
        settle = 0.0
    elif outside[-1] == len(progress) - 1:
        settle = float("inf")
    else:
        settle = float((outside[-1] + 1) * model.opt.timestep)
    return speed, settle, overshoot


def probe_dynamics(robot: Any) -> DynamicsProbe:
    """Measure every actuated joint of ``robot`` (a :class:`~embodied_ws.sim.robot.Robot`); no cache."""
    model = robot.physics_model if robot.physics_model is not None else robot.model
    home = robot.home_qpos if robot.home_qpos is not None else model.qpos0.copy()
    servo = rd.position_servos(model)
    declared = robot.velocity_limit if robot.velocity_limit is not None else np.full(model.nu, np.nan)
    rows = []
    baseline = _Baseline.of(model, home) if servo.any() else None
    for a in range(model.nu):
        speed = settle = overshoot = float("nan")
        if servo[a]:
            lo, hi = robot.joint_low[a], robot.joint_high[a]
            speed, settle, overshoot = probe_actuator(model, home, a, lo, hi, baseline)
        rows.append(JointDynamics(robot.joint_names[a], float(declared[a]), speed, settle, overshoot))
    return DynamicsProbe(rows, model_hash(model))


def cache_dir() -> Path:
    """Where probe results are cached."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "embodied_ws" / "dynamics"


def _from_dict(d: dict[str, Any]) -> DynamicsProbe:
    def num(v: Any, missing: float) -> float:
        return missing if v is None else float(v)

    rows = [
        JointDynamics(
            r["joint"],
            num(r["declared_speed"], float("nan")),
            num(r["measured_speed"], float("nan")),
            num(r["settle_s"], float("inf") if r["measured_speed"] is not None else float("nan")),
            num(r["overshoot"], float("nan")),
        )
        for r in d["joints"]
    ]
    return DynamicsProbe(rows, d["model_hash"])


def cached_probe(robot: Any) -> DynamicsProbe:
    """:func:`probe_dynamics`, read from / written to the per-model cache (a broken entry is measured again)."""
    from embodied_ws.core.atomic import write_json_atomic

    model = robot.physics_model if robot.physics_model is not None else robot.model
    path = cache_dir() / f"{model_hash(model)}.json"
    try:
        probe = _from_dict(json.loads(path.read_text()))
        if [j.joint for j in probe.joints] == list(robot.joint_names):
            return probe
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no cache entry (or an unreadable one): measure
    probe = probe_dynamics(robot)
    with contextlib.suppress(OSError):  # a read-only home: the probe is cheap enough to repeat
        write_json_atomic(path, probe.to_dict())
    return probe


def damp_underdamped(robot: Any) -> dict[str, float]:
    """``env.servo_damping: auto``: add joint damping to each servo the probe finds underdamped, up to
    critical damping at the home pose (``b = 2·√(kp·I) − kv − damping``, ``I`` the joint-space inertia the
    joint sees there, armature included). Changes ``robot.model`` and its physics copy; returns the damping
    added per joint (N·m·s/rad, or N·s/m for a slide)."""
    names = set(robot.dynamics().underdamped())
    if not names:
        return {}
    model = robot.model
    data = mujoco.MjData(model)
    data.qpos[:] = robot.home_qpos if robot.home_qpos is not None else model.qpos0
    mujoco.mj_forward(model, data)
    inertia = np.zeros((model.nv, model.nv))
    mujoco.mj_fullM(model, data, inertia)
    models = [model] + ([robot.physics_model] if robot.physics_model is not None else [])
    added: dict[str, float] = {}
    for a, row in enumerate(robot.dynamics().joints):
        if row.joint not in names:
            continue
        dof = int(model.jnt_dofadr[int(model.actuator_trnid[a, 0])])
        kp, kv = float(model.actuator_gainprm[a, 0]), float(-model.actuator_biasprm[a, 2])
        extra = 2.0 * np.sqrt(max(kp, 0.0) * inertia[dof, dof]) - kv - float(model.dof_damping[dof])
        if extra > 0:
            for m in models:
                m.dof_damping[dof] += extra
            added[row.joint] = round(float(extra), 4)
    robot._dynamics = None  # the damped model is probed again on its next use
    return added
