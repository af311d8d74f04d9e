"""User-facing errors: one clear line, exit code 2, never a traceback."""

from __future__ import annotations

EXIT_USER_ERROR = 2


class UserError(Exception):
    """Bad input from the user (file, key or value). Rendered as ``error: <where>: <what>``.

    :param what: what is wrong, in one line
    :param where: the file, ``file:line`` or config key that is wrong (optional)
    """

    def __init__(self, what: str, where: str | None = None) -> None:
        self.what = what
        self.where = where
        super().__init__(self.line())

    def line(self) -> str:
        """The single line shown to the user."""
        return f"error: {self.where}: {self.what}" if self.where else f"error: {self.what}"


class ConfigError(UserError):
    """A configuration file, key or value is wrong."""


class ModelError(UserError):
    """An MJCF model cannot be found, parsed or used."""


class EnvLost(Exception):
    """The simulator or robot behind an env stopped answering (training saves and stops: exit code 3)."""

    def __init__(self, what: str, topic: str) -> None:
        self.what = what
        self.topic = topic
        super().__init__(f"{topic}: {what}")


EXIT_ENV_LOST = 3


class UnknownNameError(UserError):
    """A name (robot, task, DR parameter ...) is not registered."""
