"""ros2 launch embodied_ws deploy.launch.py policy:=runs/reach1 dry_run:=false

Starts policy_node (lifecycle; autostart:=true configures and activates it). The node list comes from
embodied_ws.ros.launch_plan.deploy_plan (unit-tested).
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from embodied_ws.ros.launch_plan import DEPLOY_ARGS, deploy_plan


def _nodes(context, *args, **kwargs):
    values = {k: LaunchConfiguration(k).perform(context) for k in DEPLOY_ARGS}
    return [
        Node(package=s.package, executable=s.executable, name=s.name, parameters=[s.parameters], output="screen")
        for s in deploy_plan(**values)
    ]


def generate_launch_description():
    return LaunchDescription(
        [DeclareLaunchArgument(k, default_value=v) for k, v in DEPLOY_ARGS.items()] + [OpaqueFunction(function=_nodes)]
    )
