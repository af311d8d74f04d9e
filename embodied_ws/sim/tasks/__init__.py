"""Task registry: importing this package registers every built-in task."""

from embodied_ws.sim.tasks import reach, reach_color, swingup  # noqa: F401  (registration side effects)
from embodied_ws.sim.tasks.base import TASKS, Task

__all__ = ["TASKS", "Task"]
