"""Robot data: rosbag2 (MCAP) bags and LeRobot datasets."""
