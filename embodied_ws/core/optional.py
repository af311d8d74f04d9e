"""Import helpers for heavy optional libraries: a missing piece gives an install hint, not a traceback."""

from __future__ import annotations

import importlib
from types import ModuleType

from embodied_ws.core.errors import UserError


def require(module: str, hint: str | None = None) -> ModuleType:
    """Import ``module`` or raise a one-line :class:`UserError` telling how to install it.

    :param module: dotted module name
    :param hint: install command to show; defaults to ``pip install <top-level name>``
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        raise UserError(f"{exc}; install it with: {hint or 'pip install ' + top}", f"missing module {top}") from None
