"""The trained policy as one concept: its protocol, the exported MLP, and the one rollout loop."""
