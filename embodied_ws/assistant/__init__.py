"""Offline debug assistant: log sources, rule-based triage, a local LLM backend and its VRAM planner."""
