"""ros2 launch embodied_ws gazebo.launch.py robot:=arm3

Gazebo (gz sim) with the SDF world generated from our MJCF robot, ros_gz_bridge with the generated
bridge YAML, robot_state_publisher and the ros2_control spawners, so the robot speaks the same
topic contract as mujoco_sim_node (train against it with ros.mode=realtime).
Node list: embodied_ws.ros.launch_plan.gazebo_plan (unit-tested).
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription, OpaqueFunction
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

from embodied_ws.ros.launch_plan import GAZEBO_ARGS, IncludeSpec, gazebo_plan


def _actions(context, *args, **kwargs):
    values = {k: LaunchConfiguration(k).perform(context) for k in GAZEBO_ARGS}
    out = []
    for s in gazebo_plan(**values):
        if isinstance(s, IncludeSpec):
            path = [FindPackageShare(s.package), "/launch/", s.launch_file]
            out.append(IncludeLaunchDescription(PythonLaunchDescriptionSource(path), launch_arguments=s.arguments.items()))
        else:
            out.append(Node(package=s.package, executable=s.executable, name=s.name, parameters=[s.parameters],
                            arguments=list(s.arguments), output="screen"))
    return out


def generate_launch_description():
    return LaunchDescription(
        [DeclareLaunchArgument(k, default_value=v) for k, v in GAZEBO_ARGS.items()] + [OpaqueFunction(function=_actions)]
    )
