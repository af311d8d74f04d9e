"""What the control loop says about itself (no ROS): one level and one line for ``/diagnostics`` and the log.

Levels are ``OK``, ``WARN`` and ``ERROR`` (the node maps them onto ``diagnostic_msgs/DiagnosticStatus``):

* ``ERROR``: e-stop latched or asserted, state watchdog tripped, ``/joint_states`` without the robot's joints;
* ``WARN``: waiting (for states, for the e-stop state), holding at the measured pose for want of a valid
  task, a soft start after a state source that started over, or a position limit clipping the command on
  most ticks of the last window (a policy chasing something it cannot reach);
* ``OK``: soft start, running.
"""

from __future__ import annotations

from typing import Any

#: clipped ticks above this share of the window (and at least MIN_TICKS ticks) are a warning
CLIP_SHARE = 0.5
MIN_TICKS = 10


def clipping_line(core: Any) -> str:
    """``position limits clipped the command on C of the last N ticks (T of P since activation)`` when most
    recent ticks were clipped, else empty.

    :param core: a :class:`~embodied_ws.deploy.control.ControlCore`
    """
    env = core.envelope
    clipped, n = env.clipping()
    if n < MIN_TICKS or clipped <= CLIP_SHARE * n:
        return ""
    total = env.status.events["position_limit"]
    return (f"position limits clipped the command on {clipped} of the last {n} ticks "
            f"({total} of {core.published} since activation)")  # fmt: skip


def loop_status(core: Any, estop: str = "", joint_error: str = "") -> tuple[str, str]:
    """``(level, message)`` of the loop now.

    :param core: a :class:`~embodied_ws.deploy.control.ControlCore`
    :param estop: the e-stop gate's line while it holds the loop back (waiting or asserted), else empty
    :param joint_error: why ``/joint_states`` cannot be used (missing joints), else empty
    """
    st = core.envelope.status
    mode = st.mode
    if joint_error:
        return "ERROR", joint_error
    if mode == "estop":
        return "ERROR", "e-stop latched: no commands until deactivate/activate"
    if estop:
        return ("ERROR" if "asserted" in estop else "WARN"), estop
    if mode == "state_timeout":
        how = "holding the last command" if core.limits.on_state_timeout == "hold" else "going to safe_pose"
        return "ERROR", f"state watchdog: no fresh /joint_states for {st.state_age_s:.2f} s, {how}"
    if mode == "disarmed":
        waiting = [w for w, ok in (("/joint_states", core.has_state), ("/embodied/task", core.has_goal)) if not ok]
        return "WARN", (f"waiting for {', '.join(waiting)}" if waiting else "disarmed")
    if mode == "hold":
        return "WARN", f"holding at the measured pose: {st.reason}"
    if mode == "soft_start" and st.rearmed:
        return "WARN", f"soft start from the measured pose: the state source started over ({st.reason})"
    clip = clipping_line(core)
    if clip:
        return "WARN", f"{mode.replace('_', ' ')}: {clip}"
    return "OK", mode.replace("_", " ")
