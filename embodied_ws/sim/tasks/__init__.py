"""Task registry: importing this package registers every built-in task (plugins: see :mod:`.base`)."""

from embodied_ws.sim.tasks import lift, push, reach, reach_color, swingup  # noqa: F401  (registration side effects)
from embodied_ws.sim.tasks.base import TASKS, Task, make_task

__all__ = ["TASKS", "Task", "make_task"]
