"""Contact-task scenes: a table, a cube and a goal marker added to any robot, inside its own workspace.

Nothing is written by hand per robot. The arm's end-effector positions over random joint configurations
(:func:`~embodied_ws.sim.tasks.reach.workspace_sample`) give the workspace. The tool's extent in the home
pose (:func:`tool_extent`: how far fingertips or a hand sphere hang below the end-effector point) sets the
pushing height above the table. The table goes in front of the robot (the side its end effector points to
at home), under its first joint and under the home pose, at the lowest height whose pushable area is at
least half the widest; the pushable area is where the end effector reaches at pushing height with room to
get round the cube (the reachable band, eroded by the cube and the tool; for an arm turning about the
vertical, by radius and sector). Cube start and goal spots are drawn from that area, so each can be reached
from every side by construction; an arm that reaches no such area is refused in one line.

The scene is added to a copy of the robot's :class:`mujoco.MjSpec` (:attr:`Robot.spec`) and the robot's
model is replaced by the compiled result (the arm's joints, actuators and sensors keep their indices: the
cube's free joint comes last), with a ``scene_grasp`` site between the fingers and its position sensor. A
robot whose tool collides with nothing (``contype = conaffinity = 0``, like ``arm3``) gets the scene's
contact bit on its moving geoms, so it touches the cube and the table but still not itself nor the floor.
A fixed camera (:data:`CAMERA`) looks across the table at the robot, framing the table and the space above it
(demonstrations and VLA evaluation render from it when the robot has no camera of its own).
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from embodied_ws.core.errors import ModelError
from embodied_ws.sim.robot import Robot

#: contact bit of the scene's objects (and of a robot's parts that would otherwise collide with nothing)
SCENE_BIT = 8
OBJECT = "scene_object"  # body and geom of the cube
OBJECT_JOINT = "scene_object_joint"
TABLE = "scene_table"
GOAL = "scene_goal"  # mocap body of the goal marker
GRASP = "scene_grasp"  # site between the fingers and its position sensor
CAMERA = "scene_camera"  # fixed camera facing the robot across the table (demos, VLA evaluation)
#: colour names of the cube and the goal marker, as the tasks' language instructions call them
OBJECT_COLOR, GOAL_COLOR = "red", "green"
#: default cube edge (m) for an arm without a gripper
DEFAULT_CUBE = 0.05
WORKSPACE_POINTS = 32768
_CELL = 0.02  # m: grid cell used to measure the reachable table area
_BAND = 0.02  # m: half-height of the end-effector band at pushing height
_SECTOR = np.deg2rad(70.0)  # half-angle of the table sector in front of the robot


@dataclass
class Scene:
    """Where the scene's objects are (world frame).

    :param table_top: height of the table surface (m)
    :param table_center: ``(2,)`` xy of the table's centre
    :param table_axes: ``(2, 2)`` rows: the table's long (away from the robot) and lateral unit axes
    :param table_half: ``(2,)`` half extents along those axes (m)
    :param cube_half: half edge of the cube (m)
    :param push_height: end-effector height at which it pushes the cube (m)
    :param spots: ``(m, 2)`` cube/goal positions on the table: centres of grid cells reachable at
        :attr:`push_height` with every cell around them (a spot is drawn anywhere within :attr:`spot_jitter`)
    :param tool_radius: how far the tool's surface reaches beyond the end-effector point (m), in the home pose
        (a gripper as it stands there: the room the scene leaves around the cube)
    :param push_radius: the same with the driven grippers closed, the pose a gripper pushes in (a Panda's
        closed fingers reach 1.4 cm, open 5.4 cm); :attr:`tool_radius` when no gripper is driven
    :param tool_floor: end-effector height at which the tool's lowest point (home orientation) touches the table
        top (m): the table-top tasks' ``ee_floor`` (``ee_delta`` steps never lead below it)
    :param object_qpos: address of the cube's free joint in ``qpos`` (7 entries)
    :param object_qvel: address of the cube's free joint in ``qvel`` (6 entries)
    :param grasp_sensor: address in ``sensordata`` of the grasp point's position (3 entries, :data:`GRASP`)
    """

    table_top: float
    table_center: np.ndarray
    table_axes: np.ndarray
    table_half: np.ndarray
    cube_half: float
    push_height: float
    spots: np.ndarray
    tool_radius: float
    push_radius: float = 0.0
    tool_floor: float | None = None
    spot_jitter: float = _CELL / 2
    object_qpos: int = 0
    grasp_sensor: int = 0
    object_qvel: int = 0

    def on_table(self, xyz: np.ndarray) -> np.ndarray:
        """``(n,)`` bool: the cube centre ``xyz (n, 3)`` is above the table's surface, not fallen below it."""
        local = (xyz[:, :2] - self.table_center) @ self.table_axes.T
        inside = np.all(np.abs(local) <= self.table_half, axis=1)
        return inside & (xyz[:, 2] > self.table_top - 0.5 * self.cube_half)


def cube_half_size(robot: Robot, size: float = 0.0) -> float:
    """Half edge of the cube: ``size / 2`` when set, else half the widest open fingertip gap of the robot's
    grippers (clipped to 2–6 cm), else :data:`DEFAULT_CUBE` for an arm without a gripper.

    Half the open gap is the ratio robosuite's and ManiSkill's lift cubes have (4–4.4 cm for a Panda's 8 cm):
    a quarter of the gap free on each side. At 0.7 × (a 5.9-cm cube, 1.25 cm free a side) a Panda learning
    ``lift`` landed its fingers on top of the cube and never grasped in 30 minutes."""
    if size > 0:
        return size / 2.0
    gaps = [g.gap_open for g in robot.grippers if g.gap_open]
    if gaps:
        return float(np.clip(0.5 * max(gaps), 0.02, 0.06)) / 2.0
    return DEFAULT_CUBE / 2.0


def _tool_bodies(model: mujoco.MjModel, ee_body: int) -> np.ndarray:
    """Bool per body: in the subtree of the end effector's body (hand, fingers)."""
    inside = np.zeros(model.nbody, dtype=bool)
    for b in range(model.nbody):
        a = b
        while a > 0 and a != ee_body:
            a = int(model.body_parentid[a])
        inside[b] = a == ee_body and b > 0
    return inside


def ee_body_id(model: mujoco.MjModel) -> int:
    """The body carrying the end-effector site (the robot's ``embodied_ee_pos`` sensor), -1 when none."""
    from embodied_ws.sim.robot import EE_SENSOR

    sid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SENSOR, EE_SENSOR)
    return -1 if sid < 0 else int(model.site_bodyid[int(model.sensor_objid[sid])])


def _collides(model: mujoco.MjModel, g: int) -> bool:
    return bool(model.geom_contype[g] or model.geom_conaffinity[g])


def _floor_height(model: mujoco.MjModel) -> float | None:
    planes = [g for g in range(model.ngeom) if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_PLANE]
    planes = [g for g in planes if model.geom_bodyid[g] == 0]
    return max(float(model.geom_pos[g, 2]) for g in planes) if planes else None


def tool_extent(model: mujoco.MjModel, data: mujoco.MjData, ee: np.ndarray) -> tuple[float, float]:
    """``(drop, radius)`` of the tool (the end effector's body and its children) in the pose of ``data``:
    how far its lowest point lies below the end-effector point ``ee``, and how far its lowest part reaches
    sideways from it (m). From the geoms' bounding boxes; geoms that collide when some do."""
    tool = _tool_bodies(model, ee_body_id(model))
    geoms = [g for g in range(model.ngeom) if tool[model.geom_bodyid[g]]]
    if any(_collides(model, g) for g in geoms):
        geoms = [g for g in geoms if _collides(model, g)]
    if not geoms:
        return 0.01, 0.01
    rows = []
    for g in geoms:
        rot = data.geom_xmat[g].reshape(3, 3)
        centre = data.geom_xpos[g] + rot @ model.geom_aabb[g, :3]
        ext = np.abs(rot) @ model.geom_aabb[g, 3:]
        if model.geom_rbound[g] > 0 and not model.geom_aabb[g, :3].any():  # a rotated box's bounds exceed a sphere's
            ext = np.minimum(ext, model.geom_rbound[g])
        rows.append((centre[2] - ext[2], float(np.linalg.norm(centre[:2] - ee[:2])) + float(ext[:2].max())))
    low = min(z for z, _ in rows)
    radius = max(r for z, r in rows if z < low + 0.03)
    return float(max(ee[2] - low, 0.0)), float(np.clip(radius, 0.005, 0.08))


def closed_tool_radius(robot: Robot, home_radius: float) -> float:
    """The tool's sideways reach (:func:`tool_extent`) in the home pose with every driven gripper closed, the
    pose a gripper arm pushes in; ``home_radius`` when the robot drives no gripper (held, or none)."""
    from embodied_ws.sim.gripper import place

    if not robot.gripper_actuators:
        return home_radius
    model, qpos = robot.model, robot.home_qpos
    for g in robot.grippers[: len(robot.gripper_actuators)]:
        qpos = place(model, qpos, g, -1.0)
    data = mujoco.MjData(model)
    data.qpos[:] = qpos
    mujoco.mj_forward(model, data)
    return tool_extent(model, data, data.sensordata[robot.ee_sensor_idx].copy())[1]


def grasp_point(model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
    """World position between the tool's lowest geoms (a gripper's finger pads; a hand sphere's centre)."""
    tool = _tool_bodies(model, ee_body_id(model))
    geoms = [g for g in range(model.ngeom) if tool[model.geom_bodyid[g]]]
    if any(_collides(model, g) for g in geoms):
        geoms = [g for g in geoms if _collides(model, g)]
    if not geoms:
        return data.xpos[ee_body_id(model)].copy()
    low = np.array([data.geom_xpos[g, 2] - model.geom_rbound[g] for g in geoms])
    near = [g for g, z in zip(geoms, low, strict=True) if z < low.min() + 0.03]
    return np.mean([data.geom_xpos[g] for g in near], axis=0)


def _disk(radius: int) -> list[tuple[int, int]]:
    return [
        (i, j) for i in range(-radius, radius + 1) for j in range(-radius, radius + 1) if i * i + j * j <= radius**2
    ]


def _eroded_cells(xy: np.ndarray, radius: int) -> np.ndarray:
    """``(m, 2)`` grid cells (of :data:`_CELL`) of the region ``xy`` covers (closed: one-cell holes of the
    random sample filled) whose every neighbour within ``radius`` cells is in it too: spots the tool can reach
    around."""
    cells = {tuple(c) for c in np.floor(xy / _CELL).astype(int).tolist()}
    ring = _disk(1)
    grown = {(c[0] + i, c[1] + j) for c in cells for i, j in ring}
    closed = {c for c in grown if all((c[0] + i, c[1] + j) in grown for i, j in ring)}
    disk = _disk(radius)
    kept = [c for c in closed if all((c[0] + i, c[1] + j) in closed for i, j in disk)]
    return np.array(sorted(kept), dtype=float).reshape(-1, 2)


def _radial_spots(local: np.ndarray, radius: float, clear: float) -> np.ndarray:
    """Spots for an arm whose first joint turns about the vertical (reach at a height depends on the radius
    only): the radii the band reaches (one-bin gaps filled), less ``radius`` at both ends, over the sector in
    front of the robot less ``radius`` at both sides; ``(m, 2)`` in the robot's local frame."""
    bins = set(np.floor(np.hypot(local[:, 0], local[:, 1]) / _CELL).astype(int).tolist())
    bins |= {b for b in range(min(bins, default=0), max(bins, default=0)) if b - 1 in bins and b + 1 in bins}
    k = int(np.ceil(radius / _CELL))
    kept = [b for b in sorted(bins) if all(b + i in bins for i in range(-k, k + 1)) and (b + 0.5) * _CELL > clear]
    out = []
    for b in kept:
        r = (b + 0.5) * _CELL
        width = _SECTOR - radius / r
        if width > 0:
            for a in np.arange(-width, width + 1e-9, _CELL / r):
                out.append((r * np.cos(a), r * np.sin(a)))
    return np.array(out, dtype=float).reshape(-1, 2)


def plan_scene(robot: Robot, cube_half: float, joint_margin: float = 0.0) -> Scene:
    """Pick the table height, footprint and reachable spots from the arm's own kinematics.

    :param robot: a robot with an end-effector sensor
    :param cube_half: half edge of the cube (m)
    :param joint_margin: fraction of each joint range left out when sampling the workspace
    :raises ModelError: the end effector reaches no band of table in front of the robot
    """
    from embodied_ws.sim.tasks.reach import workspace_sample

    model = robot.model
    _, pts = workspace_sample(robot, None, joint_margin, WORKSPACE_POINTS)
    data = mujoco.MjData(model)
    data.qpos[:] = robot.home_qpos
    mujoco.mj_forward(model, data)
    home_ee = data.sensordata[robot.ee_sensor_idx].copy()
    first = int(np.flatnonzero(model.jnt_qposadr == robot.qpos_idx[0])[0])  # the arm's first joint
    base = data.xanchor[first, :2].copy()
    ahead = home_ee[:2] - base
    axis = ahead / np.linalg.norm(ahead) if np.linalg.norm(ahead) > 1e-6 else np.array([1.0, 0.0])
    axes = np.array([axis, [-axis[1], axis[0]]])
    drop, tool_radius = tool_extent(model, data, home_ee)
    local = (pts[:, :2] - base) @ axes.T
    clear = max(0.12, 2.5 * tool_radius + 2 * cube_half)  # keep the table off the robot's base
    front = (local[:, 0] > clear) & (np.abs(np.arctan2(local[:, 1], local[:, 0])) < _SECTOR)
    floor = _floor_height(model)
    if floor is None:  # no floor: the robot stands on the table (its base's height)
        floor = float(data.xpos[int(model.body_parentid[int(model.jnt_bodyid[first])]), 2]) - 0.02
    # the end effector's height when pushing: the tool's lowest point (fingertips, a hand sphere) just above
    # the table, at least at the cube's upper half
    lift = max(1.5 * cube_half, drop + 0.005)
    # under the arm: below its first joint (links sweep above it) and below the home pose's end effector
    ceiling = min(home_ee[2] - drop - 2 * cube_half - 0.03, float(data.xanchor[first, 2]))
    erode = int(np.ceil((cube_half + tool_radius + 0.03) / _CELL))  # room to get behind the cube, any side
    yaw_base = model.jnt_type[first] == mujoco.mjtJoint.mjJNT_HINGE and abs(data.xaxis[first, 2]) > 0.99
    areas: list[tuple[float, np.ndarray]] = []
    for top in np.arange(pts[:, 2].min(), pts[:, 2].max(), 0.01):
        if (floor is not None and top < floor + 0.02) or top > ceiling:
            continue
        band = front & (np.abs(pts[:, 2] - (top + lift)) < _BAND)
        if yaw_base:
            areas.append((float(top), _radial_spots(local[band], erode * _CELL, clear)))
        else:
            areas.append((float(top), (_eroded_cells(local[band], erode) + 0.5) * _CELL))
    most = max((len(a) for _, a in areas), default=0)
    if most < 4:
        raise ModelError(
            "the end effector reaches no band of table in front of the robot wide enough to push a cube", "env.robot"
        )
    # the lowest table whose pushable area is at least half the widest: a table under the arm, reached from above
    top, spots_local = next((t, a) for t, a in areas if len(a) >= 0.5 * most)
    margin = 2 * cube_half + 0.05
    lo, hi = spots_local.min(axis=0) - margin, spots_local.max(axis=0) + margin
    lo[0] = max(lo[0], clear - 0.5 * margin)  # the table's near edge stays off the robot's base
    centre_local = (lo + hi) / 2.0
    half = (hi - lo) / 2.0
    spots = base + spots_local @ axes
    return Scene(
        table_top=top,
        table_center=base + centre_local @ axes,
        table_axes=axes,
        table_half=half,
        cube_half=cube_half,
        push_height=top + lift,
        tool_floor=top + drop,
        spots=spots,
        tool_radius=tool_radius,
        push_radius=closed_tool_radius(robot, tool_radius),
    )


def add_scene(robot: Robot, cube_half: float, cube_mass: float, goal_radius: float, joint_margin: float = 0.0) -> Scene:
    """Add the table, the cube (free joint) and the goal marker to ``robot`` and replace its model.

    Idempotent: a robot that already has the scene (a second env over the same :class:`Robot`) is planned
    again (the same deterministic scene) but not rebuilt.

    :param robot: a robot loaded with an end-effector sensor (:attr:`Robot.spec` set)
    :param cube_half: half edge of the cube (m)
    :param cube_mass: mass of the cube (kg)
    :param goal_radius: radius of the goal marker disc (m): the success distance
    :param joint_margin: fraction of each joint range left out when sampling the workspace
    """
    if robot.spec is None:
        raise ModelError("this robot was not loaded from a spec; contact tasks cannot add their scene", "env.robot")
    built = mujoco.mj_name2id(robot.model, mujoco.mjtObj.mjOBJ_BODY, OBJECT) >= 0
    if not built:
        robot.dynamics()  # the arm's own servo dynamics, measured (and cached) without the scene
    scene = plan_scene(robot, cube_half, joint_margin)
    if not built:
        _build(robot, scene, cube_mass, goal_radius)
    jid = mujoco.mj_name2id(robot.model, mujoco.mjtObj.mjOBJ_JOINT, OBJECT_JOINT)
    scene.object_qpos = int(robot.model.jnt_qposadr[jid])
    scene.object_qvel = int(robot.model.jnt_dofadr[jid])
    sid = mujoco.mj_name2id(robot.model, mujoco.mjtObj.mjOBJ_SENSOR, GRASP)
    scene.grasp_sensor = int(robot.model.sensor_adr[sid])
    return scene


def _build(robot: Robot, scene: Scene, cube_mass: float, goal_radius: float) -> None:
    old = robot.model
    spec = robot.spec.copy()  # type: ignore[union-attr]
    tool = _tool_bodies(old, ee_body_id(old))
    if not any(_collides(old, g) for g in range(old.ngeom) if tool[old.geom_bodyid[g]]):
        # a robot that collides with nothing: its moving geoms touch the scene (not themselves, not the floor)
        for b in range(1, old.nbody):
            name = mujoco.mj_id2name(old, mujoco.mjtObj.mjOBJ_BODY, b)
            if old.body_weldid[b] == 0 or not name:
                continue
            for geom in spec.body(name).geoms:
                geom.conaffinity = int(geom.conaffinity) | SCENE_BIT
    # a site between the fingers (on the end effector's body) and its position sensor: where a grasp holds
    ee_body = ee_body_id(old)
    data = mujoco.MjData(old)
    data.qpos[:] = robot.home_qpos
    mujoco.mj_forward(old, data)
    local = data.xmat[ee_body].reshape(3, 3).T @ (grasp_point(old, data) - data.xpos[ee_body])
    spec.body(mujoco.mj_id2name(old, mujoco.mjtObj.mjOBJ_BODY, ee_body)).add_site(name=GRASP, pos=local.tolist())
    spec.add_sensor(name=GRASP, type=mujoco.mjtSensor.mjSENS_FRAMEPOS, objtype=mujoco.mjtObj.mjOBJ_SITE, objname=GRASP)
    mask = 1 | SCENE_BIT
    yaw = np.arctan2(scene.table_axes[0, 1], scene.table_axes[0, 0])
    quat = [np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]
    floor = _floor_height(old)
    bottom = max(floor if floor is not None else scene.table_top - 0.8, scene.table_top - 0.8)
    depth = max((scene.table_top - bottom) / 2.0, 0.01)
    world = spec.worldbody
    world.add_geom(
        name=TABLE,
        type=mujoco.mjtGeom.mjGEOM_BOX,
        pos=[*scene.table_center, scene.table_top - depth],
        quat=quat,
        size=[*scene.table_half, depth],
        contype=mask,
        conaffinity=mask,
        friction=[1.0, 0.005, 0.0001],
        rgba=[0.55, 0.42, 0.3, 1.0],
    )
    s = scene.cube_half
    start = [*scene.table_center, scene.table_top + s]
    body = world.add_body(name=OBJECT, pos=start)
    body.add_freejoint(name=OBJECT_JOINT)
    body.add_geom(
        name=OBJECT,
        type=mujoco.mjtGeom.mjGEOM_BOX,
        size=[s, s, s],
        mass=cube_mass,
        contype=mask,
        conaffinity=mask,
        condim=4,  # torsional friction: a pushed cube does not spin in place
        friction=[1.0, 0.005, 0.0001],
        rgba=[0.85, 0.15, 0.15, 1.0],
    )
    goal = world.add_body(name=GOAL, mocap=True, pos=[*scene.table_center, scene.table_top + 0.001])
    goal.add_geom(
        name=GOAL,
        type=mujoco.mjtGeom.mjGEOM_CYLINDER,
        size=[goal_radius, 0.001, 0],
        contype=0,
        conaffinity=0,
        rgba=[0.1, 0.8, 0.2, 0.5],
    )
    _add_camera(world, scene)
    for key in spec.keys:
        if len(key.qpos):
            key.qpos = [*key.qpos, *start, 1.0, 0.0, 0.0, 0.0]
        if len(key.qvel):
            key.qvel = [*key.qvel, *([0.0] * 6)]
        if len(key.mpos):
            key.mpos = [*key.mpos, *goal.pos]
        if len(key.mquat):
            key.mquat = [*key.mquat, 1.0, 0.0, 0.0, 0.0]
    try:
        model = spec.compile()
    except ValueError as exc:
        raise ModelError(f"cannot add the contact scene: {str(exc).strip().splitlines()[0]}", "env.robot") from None
    model.dof_damping[: old.nv] = old.dof_damping  # damping added by env.servo_damping: auto
    home = np.concatenate([robot.home_qpos, start, [1.0, 0.0, 0.0, 0.0]])
    robot.model, robot.spec, robot.home_qpos = model, spec, home


def camera_pose(scene: Scene, fovy: float = 45.0) -> tuple[np.ndarray, np.ndarray]:
    """``(position, xyaxes)`` of :data:`CAMERA`: beyond the table's far edge, 45 degrees up, looking back at the
    centre of the spots where cubes and goals are placed, just far enough to see them all with a margin."""
    axis = np.array([*scene.table_axes[0], 0.0])
    centre = scene.spots.mean(axis=0)
    look = np.array([*centre, scene.table_top + 2 * scene.cube_half])
    reach = float(np.linalg.norm(scene.spots - centre, axis=1).max()) + 4 * scene.cube_half + 0.05
    dist = reach / np.tan(np.deg2rad(fovy) / 2.0)
    elev = np.deg2rad(45.0)
    pos = look + dist * (np.cos(elev) * axis + np.array([0.0, 0.0, np.sin(elev)]))
    forward = (look - pos) / np.linalg.norm(look - pos)
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    return pos, np.concatenate([right, up])


def _add_camera(world: mujoco.MjsBody, scene: Scene) -> None:
    pos, xyaxes = camera_pose(scene)
    world.add_camera(name=CAMERA, pos=pos.tolist(), xyaxes=xyaxes.tolist(), fovy=45.0)
