#!/usr/bin/env bash
# Source ROS 2 (rclpy and messages for the ROS nodes), then run the container's command.
set -e
# shellcheck disable=SC1091
source "/opt/ros/${ROS_DISTRO}/setup.bash"
# llama.cpp and torch find the CUDA runtime libraries that the pinned nvidia-* wheels ship
NV=$(find /opt/embodied_ws/.venv/lib/python3.12/site-packages/nvidia -maxdepth 3 -name lib -type d 2>/dev/null | paste -sd: -)
export LD_LIBRARY_PATH="${NV}${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
exec "$@"
