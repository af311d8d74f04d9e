"""embodied_ws.deploy."""
