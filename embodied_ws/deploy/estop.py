"""Know the e-stop before the first command (no ROS): an e-stop that is already asserted blocks activation.

``/embodied/estop`` is latched (transient local): a publisher's last value reaches a subscriber that
joins later, but only after discovery. :class:`EstopGate` tells the node when the state is known:

* a value arrived → ``asserted`` (refuse: nothing is ever published) or ``released`` (go);
* a publisher is matched but no value came within ``latched_wait_s`` → ``unlatched`` (go; warned: an
  e-stop that does not latch its state cannot block activation);
* no publisher appeared within ``discovery_s`` → ``absent`` (go; warned: nothing can stop the loop
  but the node's own lifecycle);
* otherwise → ``waiting`` (publish nothing yet).

Times are seconds on the caller's monotonic clock.
"""

from __future__ import annotations

#: the gate's answers that let commands through
GO = ("released", "unlatched", "absent")


class EstopGate:
    """Whether the e-stop's state is known, from the first :meth:`update` on.

    :param discovery_s: how long to wait for any e-stop publisher to be discovered
    :param latched_wait_s: how long to wait for a discovered publisher's latched value
    """

    def __init__(self, discovery_s: float = 3.0, latched_wait_s: float = 2.0) -> None:
        self.discovery_s = discovery_s
        self.latched_wait_s = latched_wait_s
        self.value: bool | None = None
        self._t0: float | None = None
        self._t_pub: float | None = None
        self.state = "waiting"

    def received(self, asserted: bool) -> None:
        """An ``/embodied/estop`` value arrived."""
        self.value = bool(asserted)

    def update(self, now: float, publishers: int) -> str:
        """The gate's answer at ``now`` with ``publishers`` e-stop publishers matched (see the module doc)."""
        if self._t0 is None:
            self._t0 = now
        if publishers > 0 and self._t_pub is None:
            self._t_pub = now
        if self.value is not None:
            self.state = "asserted" if self.value else "released"
        elif self.state == "waiting":
            if self._t_pub is not None and now - self._t_pub >= self.latched_wait_s:
                self.state = "unlatched"
            elif self._t_pub is None and now - self._t0 >= self.discovery_s:
                self.state = "absent"
        return self.state

    @property
    def go(self) -> bool:
        """Whether commands may be published (the state is known and not asserted)."""
        return self.state in GO

    def describe(self) -> str:
        """One line for the log and /diagnostics."""
        return {
            "waiting": "waiting for the e-stop state on /embodied/estop",
            "asserted": "e-stop asserted on /embodied/estop: release it (publish false) first",
            "released": "e-stop released",
            "unlatched": "the /embodied/estop publisher sent no state (publish it latched, transient local): "
            "activating without a known e-stop state",
            "absent": "no e-stop publisher on /embodied/estop: activating without an e-stop",
        }[self.state]
