"""Gazebo (gz sim) assets generated from our MJCF robots: SDF world + model, URDF for ros2_control,
controller and ros_gz_bridge YAML. ROS-free; ``launch/gazebo.launch.py`` uses the files.

The SDF mirrors the compiled MuJoCo model at its home pose: one link per body (mass, inertia, box /
sphere / capsule / cylinder visuals and collisions), revolute/prismatic joints with MuJoCo's axes,
limits, damping and friction, and the gz_ros2_control plugin so the standard
``joint_group_position_controller`` serves ``/joint_group_position_controller/commands``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

import mujoco
import numpy as np
import yaml

from embodied_ws.sim.robot import Robot

_GEOM = mujoco.mjtGeom


@dataclass(frozen=True)
class GazeboAssets:
    """Paths of the generated files."""

    world: Path
    urdf: Path
    controllers: Path
    bridge: Path


def _rpy(quat: np.ndarray) -> tuple[float, float, float]:
    w, x, y, z = quat
    roll = math.atan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y))
    pitch = math.asin(max(-1.0, min(1.0, 2 * (w * y - z * x))))
    yaw = math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    return roll, pitch, yaw


def _pose(pos: np.ndarray, quat: np.ndarray) -> str:
    return " ".join(f"{v:.6g}" for v in (*pos, *_rpy(quat)))


def _shape(model: mujoco.MjModel, g: int) -> str | None:
    t, s = int(model.geom_type[g]), model.geom_size[g]
    if t == _GEOM.mjGEOM_SPHERE:
        return f"<sphere><radius>{s[0]:.6g}</radius></sphere>"
    if t == _GEOM.mjGEOM_CAPSULE:
        return f"<capsule><radius>{s[0]:.6g}</radius><length>{2 * s[1]:.6g}</length></capsule>"
    if t == _GEOM.mjGEOM_CYLINDER:
        return f"<cylinder><radius>{s[0]:.6g}</radius><length>{2 * s[1]:.6g}</length></cylinder>"
    if t == _GEOM.mjGEOM_BOX:
        return f"<box><size>{2 * s[0]:.6g} {2 * s[1]:.6g} {2 * s[2]:.6g}</size></box>"
    return None  # planes (the world has its own ground), meshes and others are left out


def _name(model: mujoco.MjModel, obj: mujoco.mjtObj, i: int, prefix: str) -> str:
    return mujoco.mj_id2name(model, obj, i) or f"{prefix}{i}"


def _links(robot: Robot) -> list[int]:
    """Bodies that become links: every non-world, non-mocap body with mass or geoms."""
    m = robot.model
    return [b for b in range(1, m.nbody) if m.body_mocapid[b] < 0]


def _tree(robot: Robot) -> list[tuple[int, str, str, list[int]]]:
    """``(body, parent link name, link name, joint ids)`` for every link, parents first."""
    m = robot.model
    out = []
    for b in _links(robot):
        parent = int(m.body_parentid[b])
        pname = "world" if parent == 0 else _name(m, mujoco.mjtObj.mjOBJ_BODY, parent, "body")
        out.append(
            (
                b,
                pname,
                _name(m, mujoco.mjtObj.mjOBJ_BODY, b, "body"),
                [j for j in range(m.njnt) if m.jnt_bodyid[j] == b],
            )
        )
    return out


def model_sdf(robot: Robot) -> str:
    """The ``<model>`` element of ``robot`` at its home pose."""
    m = robot.model
    d = mujoco.MjData(m)
    d.qpos[:] = robot.home_qpos if robot.home_qpos is not None else m.qpos0
    mujoco.mj_kinematics(m, d)
    out = [f'<model name="{escape(robot.name)}">']
    for b in _links(robot):
        name = _name(m, mujoco.mjtObj.mjOBJ_BODY, b, "body")
        out.append(f'<link name="{escape(name)}"><pose>{_pose(d.xpos[b], d.xquat[b])}</pose>')
        mass = max(float(m.body_mass[b]), 1e-6)
        ix, iy, iz = (max(float(v), 1e-9) for v in m.body_inertia[b])
        out.append(
            f"<inertial><pose>{_pose(m.body_ipos[b], m.body_iquat[b])}</pose><mass>{mass:.6g}</mass>"
            f"<inertia><ixx>{ix:.6g}</ixx><iyy>{iy:.6g}</iyy><izz>{iz:.6g}</izz>"
            "<ixy>0</ixy><ixz>0</ixz><iyz>0</iyz></inertia></inertial>"
        )
        for g in range(m.ngeom):
            shape = _shape(m, g) if m.geom_bodyid[g] == b else None
            if shape is None:
                continue
            gname = _name(m, mujoco.mjtObj.mjOBJ_GEOM, g, "geom")
            pose = _pose(m.geom_pos[g], m.geom_quat[g])
            r, gg, bb, a = m.geom_rgba[g]
            out.append(
                f'<visual name="{escape(gname)}_visual"><pose>{pose}</pose><geometry>{shape}</geometry>'
                f"<material><diffuse>{r:.3g} {gg:.3g} {bb:.3g} {a:.3g}</diffuse>"
                f"<ambient>{r:.3g} {gg:.3g} {bb:.3g} {a:.3g}</ambient></material></visual>"
            )
            if m.geom_contype[g] or m.geom_conaffinity[g]:
                out.append(
                    f'<collision name="{escape(gname)}_collision"><pose>{pose}</pose>'
                    f"<geometry>{shape}</geometry></collision>"
                )
        out.append("</link>")
    out += _joints_sdf(robot)
    out.append(
        '<plugin filename="gz_ros2_control-system" name="gz_ros2_control::GazeboSimROS2ControlPlugin">'
        "<parameters>controllers.yaml</parameters></plugin>"
    )
    out.append("</model>")
    return "\n".join(out)


def _joints_sdf(robot: Robot) -> list[str]:
    m = robot.model
    out = []
    for _body, parent_name, child, jnts in _tree(robot):
        if not jnts:
            out.append(
                f'<joint name="{escape(child)}_fixed" type="fixed"><parent>{escape(parent_name)}</parent>'
                f"<child>{escape(child)}</child></joint>"
            )
            continue
        for j in jnts:
            kind = {_jt.mjJNT_HINGE: "revolute", _jt.mjJNT_SLIDE: "prismatic"}.get(mujoco.mjtJoint(int(m.jnt_type[j])))
            if kind is None:
                continue
            jname = _name(m, mujoco.mjtObj.mjOBJ_JOINT, j, "joint")
            lo, hi = m.jnt_range[j] if m.jnt_limited[j] else (-1e16, 1e16)
            dof = int(m.jnt_dofadr[j])
            act = [a for a in range(m.nu) if m.actuator_trnid[a, 0] == j]
            effort = (
                float(np.abs(m.actuator_forcerange[act[0]]).max()) if act and m.actuator_forcelimited[act[0]] else 1e3
            )
            axis = " ".join(f"{v:.6g}" for v in m.jnt_axis[j])
            jpos = " ".join(f"{v:.6g}" for v in m.jnt_pos[j])
            out.append(
                f'<joint name="{escape(jname)}" type="{kind}"><pose>{jpos} 0 0 0</pose>'
                f"<parent>{escape(parent_name)}</parent><child>{escape(child)}</child>"
                f"<axis><xyz>{axis}</xyz><limit><lower>{lo:.6g}</lower><upper>{hi:.6g}</upper>"
                f"<effort>{effort:.6g}</effort></limit><dynamics><damping>{m.dof_damping[dof]:.6g}</damping>"
                f"<friction>{m.dof_frictionloss[dof]:.6g}</friction></dynamics></axis></joint>"
            )
    return out


_jt = mujoco.mjtJoint


def world_sdf(robot: Robot) -> str:
    """A world with physics at the model's timestep, the gz systems the bridge needs, ground and light."""
    dt = robot.model.opt.timestep
    g = " ".join(f"{v:.6g}" for v in robot.model.opt.gravity)
    return f"""<?xml version="1.0"?>
<sdf version="1.9">
<world name="embodied">
<physics name="default" type="ignored"><max_step_size>{dt:.6g}</max_step_size><real_time_factor>1.0</real_time_factor></physics>
<gravity>{g}</gravity>
<plugin filename="gz-sim-physics-system" name="gz::sim::systems::Physics"/>
<plugin filename="gz-sim-user-commands-system" name="gz::sim::systems::UserCommands"/>
<plugin filename="gz-sim-scene-broadcaster-system" name="gz::sim::systems::SceneBroadcaster"/>
<plugin filename="gz-sim-sensors-system" name="gz::sim::systems::Sensors"><render_engine>ogre2</render_engine></plugin>
<light type="directional" name="sun"><pose>0 0 5 0 0 0</pose><direction>-0.3 0.3 -1</direction>
<diffuse>0.8 0.8 0.8 1</diffuse></light>
<model name="ground"><static>true</static><link name="ground"><collision name="c"><geometry><plane><normal>0 0 1</normal>
<size>10 10</size></plane></geometry></collision><visual name="v"><geometry><plane><normal>0 0 1</normal><size>10 10</size>
</plane></geometry></visual></link></model>
{model_sdf(robot)}
</world>
</sdf>
"""  # noqa: E501


def urdf(robot: Robot) -> str:
    """robot_description for gz_ros2_control: the link/joint tree plus the ``<ros2_control>`` block."""
    m = robot.model
    links = _links(robot)
    out = [f'<?xml version="1.0"?>\n<robot name="{escape(robot.name)}">', '<link name="world"/>']
    out += [f'<link name="{escape(_name(m, mujoco.mjtObj.mjOBJ_BODY, b, "body"))}"/>' for b in links]
    for b, pname, cname, jnts in _tree(robot):
        origin = " ".join(f"{v:.6g}" for v in m.body_pos[b])
        rpy = " ".join(f"{v:.6g}" for v in _rpy(m.body_quat[b]))
        if not jnts:
            out.append(
                f'<joint name="{escape(cname)}_fixed" type="fixed"><parent link="{escape(pname)}"/>'
                f'<child link="{escape(cname)}"/><origin xyz="{origin}" rpy="{rpy}"/></joint>'
            )
            continue
        j = jnts[0]
        kind = "revolute" if int(m.jnt_type[j]) == _jt.mjJNT_HINGE else "prismatic"
        lo, hi = m.jnt_range[j] if m.jnt_limited[j] else (-3.14159, 3.14159)
        out.append(
            f'<joint name="{escape(_name(m, mujoco.mjtObj.mjOBJ_JOINT, j, "joint"))}" type="{kind}">'
            f'<parent link="{escape(pname)}"/><child link="{escape(cname)}"/><origin xyz="{origin}" rpy="{rpy}"/>'
            f'<axis xyz="{" ".join(f"{v:.6g}" for v in m.jnt_axis[j])}"/>'
            f'<limit lower="{lo:.6g}" upper="{hi:.6g}" effort="100" velocity="10"/></joint>'
        )
    out.append(
        '<ros2_control name="GazeboSimSystem" type="system"><hardware>'
        "<plugin>gz_ros2_control/GazeboSimSystem</plugin></hardware>"
    )
    for name in robot.joint_names:
        out.append(
            f'<joint name="{escape(name)}"><command_interface name="position"/>'
            '<state_interface name="position"/><state_interface name="velocity"/></joint>'
        )
    out.append("</ros2_control>\n</robot>")
    return "\n".join(out)


def controllers_yaml(robot: Robot, rate_hz: float) -> dict:
    """controller_manager config: joint_state_broadcaster + joint_group_position_controller."""
    return {
        "controller_manager": {
            "ros__parameters": {
                "update_rate": round(rate_hz),
                "joint_state_broadcaster": {"type": "joint_state_broadcaster/JointStateBroadcaster"},
                "joint_group_position_controller": {"type": "position_controllers/JointGroupPositionController"},
            }
        },
        "joint_group_position_controller": {"ros__parameters": {"joints": list(robot.joint_names)}},
    }


def bridge_yaml() -> list[dict]:
    """ros_gz_bridge entries: the sim clock (joint states and commands go through ros2_control)."""
    return [
        {
            "ros_topic_name": "/clock",
            "gz_topic_name": "/clock",
            "ros_type_name": "rosgraph_msgs/msg/Clock",
            "gz_type_name": "gz.msgs.Clock",
            "direction": "GZ_TO_ROS",
        },
        {
            "ros_topic_name": "/camera/image_raw",
            "gz_topic_name": "/camera",
            "ros_type_name": "sensor_msgs/msg/Image",
            "gz_type_name": "gz.msgs.Image",
            "direction": "GZ_TO_ROS",
        },
    ]


def write_assets(robot: Robot, out_dir: Path, control_hz: float = 25.0) -> GazeboAssets:
    """Write world.sdf, robot.urdf, controllers.yaml and bridge.yaml into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    assets = GazeboAssets(
        out_dir / "world.sdf", out_dir / "robot.urdf", out_dir / "controllers.yaml", out_dir / "bridge.yaml"
    )
    assets.world.write_text(world_sdf(robot))
    assets.urdf.write_text(urdf(robot))
    assets.controllers.write_text(yaml.safe_dump(controllers_yaml(robot, control_hz), sort_keys=False))
    assets.bridge.write_text(yaml.safe_dump(bridge_yaml(), sort_keys=False))
    return assets
