"""embodied_ws.config."""
