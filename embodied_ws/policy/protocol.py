"""What every policy offers: ``reset()`` at an episode's start and ``act(obs)`` once per control period.

Implemented by the exported MLP (:class:`~embodied_ws.policy.exported.ExportedPolicy`), the VLA runner
(:class:`~embodied_ws.vla.runner.VLARunner`, an action-chunk queue) and the scripted experts
(:mod:`embodied_ws.data.expert`). Like LeRobot's ``PreTrainedPolicy.select_action`` and
``reset``: a policy may keep state within an episode (a chunk queue, an IK solution), and ``reset`` clears it.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Policy(Protocol):
    """A controller the rollout, evaluation, gap report, demo recorder and deploy node can all drive."""

    def reset(self) -> None:
        """Forget what the last episode left (called after each ``env.reset``)."""

    def act(self, obs: Any) -> Any:
        """The action for observation ``obs`` (a vector, or a mapping for image/language policies)."""
