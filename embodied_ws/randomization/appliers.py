"""DR appliers: where each randomizable parameter lives (an MjModel field, or the env itself).

Physics and visual parameters are rows/columns of MjModel arrays; they are applied by writing
into each env's own model copy, so they work for the in-process env, the vectorized env and the
MuJoCo sim node alike. Env parameters (latency, noise) are applied by the env core for every backend.
"""

from __future__ import annotations

import fnmatch
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import mujoco
import numpy as np

from embodied_ws.core.registry import Registry

ModelView = Callable[[mujoco.MjModel], np.ndarray]


@dataclass(frozen=True)
class FieldApplier:
    """A parameter stored in an MjModel array.

    :param view: returns a writable 2-D view ``(rows, cols)`` of the field
    :param obj: object type whose names the ``targets`` globs match (None: a single global row)
    :param group: ``physics`` (always applied) or ``visual`` (only when the env renders)
    :param rows_of: maps selected object ids to rows of the view (e.g. joints to dofs)
    :param tied: optional hook keeping a dependent field consistent after a write: ``(model, rows, values)``,
        and the values before the write as a fourth argument where the caller has them
    """

    view: ModelView
    obj: mujoco.mjtObj | None
    group: str = "physics"
    rows_of: Callable[[mujoco.MjModel, list[int]], list[int]] | None = None
    skip: Callable[[mujoco.MjModel, int], bool] | None = None
    tied: Callable[..., None] | None = None


@dataclass(frozen=True)
class EnvApplier:
    """A parameter the env core applies itself (latency in control steps, noise std)."""

    integer: bool = False


APPLIERS: Registry[FieldApplier | EnvApplier] = Registry("DR parameter")


def _col(name: str, cols: slice = slice(None)) -> ModelView:
    def view(model: mujoco.MjModel) -> np.ndarray:
        arr = getattr(model, name)
        return (arr[:, None] if arr.ndim == 1 else arr)[:, cols]

    return view


def _joint_dofs(model: mujoco.MjModel, joints: list[int]) -> list[int]:
    width = {mujoco.mjtJoint.mjJNT_FREE: 6, mujoco.mjtJoint.mjJNT_BALL: 3}
    dofs: list[int] = []
    for j in joints:
        n = width.get(mujoco.mjtJoint(int(model.jnt_type[j])), 1)
        dofs.extend(range(int(model.jnt_dofadr[j]), int(model.jnt_dofadr[j]) + n))
    return dofs


def _massless(model: mujoco.MjModel, body: int) -> bool:
    return body == 0 or model.body_mass[body] <= 0.0


def _tie_position_bias(
    model: mujoco.MjModel, rows: np.ndarray, values: np.ndarray, prev: np.ndarray | None = None
) -> None:
    # Position servos are gain kp on ctrl plus bias -kp' on qpos: scale both so the servo stays centred. With
    # the gains before the write (``prev``) the bias keeps its own ratio to the gain (a gripper mapping ctrl
    # 0..255 to 0..4 cm has kp' = 255 kp); without, the plain servo's kp' = kp.
    affine = model.actuator_biastype[rows] == mujoco.mjtBias.mjBIAS_AFFINE
    if prev is None:
        model.actuator_biasprm[rows[affine], 1] = -values[affine, 0]
        return
    ratio = np.divide(values[:, 0], prev[:, 0], out=np.ones(len(rows)), where=prev[:, 0] != 0)
    model.actuator_biasprm[rows[affine], 1] *= ratio[affine]


def _gravity(model: mujoco.MjModel) -> np.ndarray:
    return model.opt.gravity.reshape(1, 3)[:, 2:3]


_BODY, _GEOM, _JOINT = mujoco.mjtObj.mjOBJ_BODY, mujoco.mjtObj.mjOBJ_GEOM, mujoco.mjtObj.mjOBJ_JOINT
_ACT, _LIGHT, _CAM = mujoco.mjtObj.mjOBJ_ACTUATOR, mujoco.mjtObj.mjOBJ_LIGHT, mujoco.mjtObj.mjOBJ_CAMERA

# Contact terms: the objects a contact task adds (names from embodied_ws.sim.scene) and the robot's tool.
_OBJECT, _TABLE, _EE_SENSOR = "scene_object", "scene_table", "embodied_ee_pos"


def _not_named(prefixes: tuple[str, ...], obj: mujoco.mjtObj) -> Callable[[mujoco.MjModel, int], bool]:
    def skip(model: mujoco.MjModel, i: int) -> bool:
        return not (mujoco.mj_id2name(model, obj, i) or "").startswith(prefixes)

    return skip


def _not_tool(model: mujoco.MjModel, geom: int) -> bool:
    """Skip every geom outside the end effector's subtree (the hand and its fingers)."""
    sid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SENSOR, _EE_SENSOR)
    if sid < 0:
        return True
    ee = int(model.site_bodyid[int(model.sensor_objid[sid])])
    b = int(model.geom_bodyid[geom])
    while b > 0 and b != ee:
        b = int(model.body_parentid[b])
    return b != ee or ee == 0


def _box_inertia(model: mujoco.MjModel, body: int) -> None:
    boxes = np.flatnonzero((model.geom_bodyid == body) & (model.geom_type == mujoco.mjtGeom.mjGEOM_BOX))
    if boxes.size:
        sx, sy, sz = model.geom_size[boxes[0]]
        model.body_inertia[body] = (
            model.body_mass[body] / 3.0 * np.array([sy * sy + sz * sz, sx * sx + sz * sz, sx * sx + sy * sy])
        )


def _tie_object_inertia(model: mujoco.MjModel, rows: np.ndarray, values: np.ndarray, prev: object = None) -> None:
    for body in rows:
        _box_inertia(model, int(body))
    _set_const(model)


#: a scratch MjData per model for :func:`_set_const` (allocating one took 0.4 ms, mj_setConst 0.01 ms: two
#: per Panda push reset); weak keys, so a model's scratch goes with it
_SCRATCH: weakref.WeakKeyDictionary[mujoco.MjModel, mujoco.MjData] = weakref.WeakKeyDictionary()


def _set_const(model: mujoco.MjModel) -> None:
    # the constraint solver scales by constants derived from masses (invweight0): recompute them
    data = _SCRATCH.get(model)
    if data is None:
        data = _SCRATCH[model] = mujoco.MjData(model)
    mujoco.mj_setConst(model, data)


def _tie_cube_size(model: mujoco.MjModel, rows: np.ndarray, values: np.ndarray, prev: object = None) -> None:
    # a cube stays a cube: every half edge follows, and so do the bounds collision detection uses and the inertia
    half = np.maximum(values[:, 0], 1e-4)
    model.geom_size[rows] = half[:, None]
    model.geom_rbound[rows] = np.sqrt(3.0) * half
    model.geom_aabb[rows, 3:6] = half[:, None]
    for body in set(model.geom_bodyid[rows].tolist()):
        _box_inertia(model, int(body))
    _set_const(model)


def _tie_solimp(model: mujoco.MjModel, rows: np.ndarray, values: np.ndarray, prev: object = None) -> None:
    # dmin <= dmax, both inside (0, 1)
    model.geom_solimp[rows, 0:2] = np.clip(np.sort(values, axis=1), 1e-4, 0.9999)


# Physics (applied on every backend that exposes the model).
APPLIERS.add("body_mass", FieldApplier(_col("body_mass"), _BODY, skip=_massless))
APPLIERS.add("body_com", FieldApplier(_col("body_ipos"), _BODY, skip=_massless))
APPLIERS.add("geom_friction", FieldApplier(_col("geom_friction", slice(0, 1)), _GEOM))
APPLIERS.add("joint_damping", FieldApplier(_col("dof_damping"), _JOINT, rows_of=_joint_dofs))
APPLIERS.add("joint_armature", FieldApplier(_col("dof_armature"), _JOINT, rows_of=_joint_dofs))
APPLIERS.add("joint_frictionloss", FieldApplier(_col("dof_frictionloss"), _JOINT, rows_of=_joint_dofs))
APPLIERS.add("actuator_gain", FieldApplier(_col("actuator_gainprm", slice(0, 1)), _ACT, tied=_tie_position_bias))
APPLIERS.add("actuator_forcerange", FieldApplier(_col("actuator_forcerange"), _ACT))
APPLIERS.add("gravity", FieldApplier(_gravity, None))
# Contact terms (contact tasks: embodied_ws.sim.scene's objects, the robot's tool geoms).
_SCENE = (_OBJECT, _TABLE)
APPLIERS.add(
    "object_mass",
    FieldApplier(_col("body_mass"), _BODY, skip=_not_named((_OBJECT,), _BODY), tied=_tie_object_inertia),
)
APPLIERS.add(
    "object_size",
    FieldApplier(_col("geom_size", slice(0, 1)), _GEOM, skip=_not_named((_OBJECT,), _GEOM), tied=_tie_cube_size),
)
APPLIERS.add(
    "object_friction", FieldApplier(_col("geom_friction", slice(0, 1)), _GEOM, skip=_not_named((_OBJECT,), _GEOM))
)
APPLIERS.add(
    "table_friction", FieldApplier(_col("geom_friction", slice(0, 1)), _GEOM, skip=_not_named((_TABLE,), _GEOM))
)
APPLIERS.add("fingertip_friction", FieldApplier(_col("geom_friction", slice(0, 1)), _GEOM, skip=_not_tool))
APPLIERS.add("contact_solref", FieldApplier(_col("geom_solref", slice(0, 1)), _GEOM, skip=_not_named(_SCENE, _GEOM)))
APPLIERS.add(
    "contact_solimp",
    FieldApplier(_col("geom_solimp", slice(0, 2)), _GEOM, skip=_not_named(_SCENE, _GEOM), tied=_tie_solimp),
)
# Visual (applied only when the env renders).
APPLIERS.add("light_pos", FieldApplier(_col("light_pos"), _LIGHT, group="visual"))
APPLIERS.add("light_diffuse", FieldApplier(_col("light_diffuse"), _LIGHT, group="visual"))
APPLIERS.add("geom_rgb", FieldApplier(_col("geom_rgba", slice(0, 3)), _GEOM, group="visual"))
APPLIERS.add("camera_pos", FieldApplier(_col("cam_pos"), _CAM, group="visual"))
# Env-side, same code for every backend.
APPLIERS.add("action_latency", EnvApplier(integer=True))
APPLIERS.add("obs_latency", EnvApplier(integer=True))
APPLIERS.add("action_noise", EnvApplier())
APPLIERS.add("obs_noise", EnvApplier())


def select_rows(model: mujoco.MjModel, applier: FieldApplier, targets: tuple[str, ...]) -> np.ndarray:
    """Rows of ``applier``'s view touched by the ``targets`` name globs (all objects when empty)."""
    if applier.obj is None:
        return np.zeros(1, dtype=np.int64)
    count = applier.view(model).shape[0] if applier.rows_of is None else _object_count(model, applier.obj)
    ids = []
    for i in range(count):
        if applier.skip is not None and applier.skip(model, i):
            continue
        name = mujoco.mj_id2name(model, applier.obj, i) or ""
        if not targets or any(fnmatch.fnmatchcase(name, t) for t in targets):
            ids.append(i)
    rows = applier.rows_of(model, ids) if applier.rows_of else ids
    return np.asarray(rows, dtype=np.int64)


def _object_count(model: mujoco.MjModel, obj: mujoco.mjtObj) -> int:
    return {_JOINT: model.njnt, _BODY: model.nbody, _GEOM: model.ngeom, _ACT: model.nu}[obj]
