"""embodied_ws.core."""
