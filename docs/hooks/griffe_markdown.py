"""Griffe extension: read fp4spec's plain-text docstrings as Markdown for the API pages.

The docstrings use Sphinx roles (``:class:`FloatFormat```) and are wrapped as plain text, so
a wrapped line can start with an issue number (``#45741``), which Markdown would read as a
heading. This extension changes only how the API page renders them:

* ``:role:`name``` becomes the code span ``name``;
* a ``#`` at the start of a line, not followed by a space, is escaped.
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
LEADING_HASH = re.compile(r"^(\s*)#(?=[^#\s])", re.MULTILINE)


def to_markdown(text: str) -> str:
    return LEADING_HASH.sub(r"\1\\#", ROLE.sub(r"`\1`", text))


class PlainTextDocstrings(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = to_markdown(obj.docstring.value)
