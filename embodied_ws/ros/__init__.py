"""The only package that imports rclpy: conversions, parameters, QoS, the ROS-topic env and the nodes."""
