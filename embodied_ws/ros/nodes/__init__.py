"""ROS 2 nodes (one per module, each with ``main(args=None)``)."""
