"""embodied_ws: a ROS 2 (Jazzy) training-workstation toolkit for embodied robot learning."""

__version__ = "0.1.0"
