"""embodied_ws.randomization."""
