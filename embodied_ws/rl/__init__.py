"""embodied_ws.rl."""
