"""embodied_ws.sim."""
