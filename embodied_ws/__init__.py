"""embodied_ws: a ROS 2 (Jazzy) training-workstation toolkit for embodied robot learning."""

import os as _os

__version__ = "0.1.0"

# Headless by default: MuJoCo picks its GL backend when first imported. EGL works on GPU servers
# and with Mesa's software EGL on CPU-only machines; users may set MUJOCO_GL=osmesa or glfw instead.
if "MUJOCO_GL" not in _os.environ and not _os.environ.get("DISPLAY"):
    _os.environ["MUJOCO_GL"] = "egl"
