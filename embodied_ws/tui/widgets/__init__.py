"""Widgets of the assistant app."""
