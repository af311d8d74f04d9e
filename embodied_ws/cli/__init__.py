"""``embodied-ws <verb>``: the command-line entry point.

Each verb group lives in its own module under ``embodied_ws/cli/`` and exposes ``register(add_verb)``;
``VERB_MODULES`` lists them in ``--help`` order. Bad input prints one line
``error: <file|key>: <what is wrong>`` and exits with code 2. Heavy libraries are imported inside the
verbs so ``embodied-ws --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
import typing
from collections.abc import Callable

from embodied_ws.core.errors import EXIT_ENV_LOST, EXIT_USER_ERROR, EnvLost, UserError

#: verb modules under ``embodied_ws.cli``; each defines ``register(add_verb)``
VERB_MODULES: tuple[str, ...] = (
    "training",
    "robot",
    "task",
    "assist",
    "scale",
    "sysid",
    "data",
    "vla",
    "deploy",
)

AddVerb = Callable[[str, Callable[[argparse.Namespace], int], str, str], argparse.ArgumentParser]

_ARGUMENT_MESSAGE = re.compile(r"argument (?P<where>[^:]+): (?P<what>.*)", re.DOTALL)


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, like every other bad input: ``error: <where>: <what>``.

    ``where`` is the option (``--episodes``) or, for errors about the command line as a whole, the verb
    (``embodied-ws sysid collect``); the line ends with where to find the usage. Sub-commands use this class too.
    """

    def error(self, message: str) -> typing.NoReturn:
        """Print one line to stderr and exit with code 2 (no usage block)."""
        m = _ARGUMENT_MESSAGE.fullmatch(message)
        where, what = (m["where"].split("/")[-1], m["what"]) if m else (self.prog, message)
        what = " ".join(what.split())  # never more than one line
        self.exit(EXIT_USER_ERROR, f"error: {where}: {what} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one sub-command per verb."""
    parser = Parser(prog="embodied-ws", description="Robot-learning workstation toolkit.")
    sub = parser.add_subparsers(dest="verb", required=True)

    def add_verb(
        name: str, fn: Callable[[argparse.Namespace], int], help_text: str, example: str
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=example,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(fn=fn)
        p.add_argument("--json", action="store_true", help="print machine-readable JSON")
        return p

    for module in VERB_MODULES:
        importlib.import_module(f"embodied_ws.cli.{module}").register(add_verb)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except UserError as exc:
        print(exc.line(), file=sys.stderr)
        return EXIT_USER_ERROR
    except EnvLost as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ENV_LOST
