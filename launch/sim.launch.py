"""ros2 launch embodied_ws sim.launch.py robot:=arm3 task:=reach mode:=realtime

Starts mujoco_sim_node. The node list comes from embodied_ws.ros.launch_plan.sim_plan (unit-tested).
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from embodied_ws.ros.launch_plan import SIM_ARGS, sim_plan


def _nodes(context, *args, **kwargs):
    values = {k: LaunchConfiguration(k).perform(context) for k in SIM_ARGS}
    return [
        Node(package=s.package, executable=s.executable, name=s.name, parameters=[s.parameters], output="screen")
        for s in sim_plan(**values)
    ]


def generate_launch_description():
    return LaunchDescription(
        [DeclareLaunchArgument(k, default_value=v) for k, v in SIM_ARGS.items()] + [OpaqueFunction(function=_nodes)]
    )
