"""Textual terminal assistant over embodied_ws.assistant."""
