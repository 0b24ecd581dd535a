"""Option helpers shared by every ``fp4spec`` subcommand's parser (the CLI, conform, vectors, analyze).

Kept apart from :mod:`fp4spec.cli`, which imports the subcommands: each subcommand imports
these, and nothing here imports a subcommand.
"""

from __future__ import annotations

import argparse
import sys


class DeprecatedAlias(argparse.Action):
    """An old option name that still works, with a one-line note on stderr naming the new one."""

    def __init__(self, option_strings, dest, new: str = "", target_action: str = "store", **kw):
        self.new, self.target_action = new, target_action
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: note: {option_string} is deprecated; use {self.new}", file=sys.stderr)
        if self.target_action == "store_true":
            setattr(namespace, self.dest, True)
        elif self.target_action == "extend":
            setattr(namespace, self.dest, (getattr(namespace, self.dest, None) or []) + list(values))
        else:
            setattr(namespace, self.dest, values)


def add_deprecated(p, old: str, new: str, dest: str, kind: str, **kw) -> None:
    """Add ``old`` as a hidden, deprecated spelling of option ``new`` (same ``dest``)."""
    nargs = {"store_true": 0, "extend": "+"}.get(kind)
    p.add_argument(old, dest=dest, action=DeprecatedAlias, new=new, target_action=kind, nargs=nargs,
                   help=argparse.SUPPRESS, **kw)


def parse_args(parser: argparse.ArgumentParser, argv):
    """``(args, None)``, or ``(None, exit code)`` where argparse would exit (``--help``: 0, a bad option: 2)."""
    try:
        return parser.parse_args(argv), None
    except SystemExit as exc:
        return None, int(exc.code or 0)


__all__ = ["DeprecatedAlias", "add_deprecated", "parse_args"]
