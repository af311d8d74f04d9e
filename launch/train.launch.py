"""ros2 launch embodied_ws train.launch.py backend:=mujoco|ros robot:=arm3 task:=reach config:=reach use_sim_time:=false

backend:=mujoco trains on in-process MuJoCo envs (fastest); backend:=ros adds mujoco_sim_node in
lockstep mode and trains through the ROS topic contract. Node list: launch_plan.train_plan (unit-tested).
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from embodied_ws.ros.launch_plan import TRAIN_ARGS, train_plan


def _nodes(context, *args, **kwargs):
    values = {k: LaunchConfiguration(k).perform(context) for k in TRAIN_ARGS}
    return [
        Node(package=s.package, executable=s.executable, name=s.name, parameters=[s.parameters], output="screen")
        for s in train_plan(**values)
    ]


def generate_launch_description():
    return LaunchDescription(
        [DeclareLaunchArgument(k, default_value=v) for k, v in TRAIN_ARGS.items()] + [OpaqueFunction(function=_nodes)]
    )
