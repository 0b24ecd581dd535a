"""MkDocs hook: expand ``{{ name(args) }}`` placeholders from the code at build time.

A placeholder is replaced by the Markdown that ``PLACEHOLDERS[name](*args)`` returns,
so tables and quoted docstrings cannot go stale. Arguments are Python literals, e.g.
``{{ code_table("e2m1") }}`` or ``{{ format_summary(link_base="") }}``. A placeholder alone
on an indented line (inside an admonition or a tab) keeps that indentation on every output
line. Placeholders inside code spans and fenced code blocks are left alone.

Anything that cannot be expanded -- an unknown name, bad arguments, an object that cannot
be imported, a stray ``{{`` -- stops the build with the page name and the reason.
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tables  # noqa: E402

tables = importlib.reload(tables)  # `mkdocs serve` re-runs this file; pick up edits to tables.py
import generated  # noqa: E402

generated = importlib.reload(generated)
import if4_tables  # noqa: E402

if4_tables = importlib.reload(if4_tables)
PLACEHOLDERS = {**tables.PLACEHOLDERS, **generated.PLACEHOLDERS, **if4_tables.PLACEHOLDERS}

TOKEN = re.compile(
    r"(?P<code>^[ \t]*(?P<fence>`{3,}|~{3,})[^\n]*\n.*?^[ \t]*(?P=fence)[ \t]*$|`[^`\n]+`)"
    r"|(?P<placeholder>\{\{\s*(?P<name>\w+)\((?P<args>[^\n]*?)\)\s*\}\})"
    r"|(?P<stray>\{\{)",
    re.MULTILINE | re.DOTALL,
)


def expand(markdown: str, where: str = "<string>") -> str:
    """Return ``markdown`` with every placeholder replaced by its rendered Markdown."""

    def replace(m: re.Match) -> str:
        if m.group("code"):
            return m.group(0)
        line = markdown[markdown.rfind("\n", 0, m.start()) + 1:m.start()]
        if m.group("stray"):
            raise PluginError(f"{where}: malformed placeholder near {markdown[m.start():m.start() + 60]!r}")
        name = m.group("name")
        if name not in PLACEHOLDERS:
            raise PluginError(f"{where}: unknown placeholder {name!r}; known: {', '.join(PLACEHOLDERS)}")
        try:
            call = ast.parse(f"f({m.group('args')})", mode="eval").body
            args = [ast.literal_eval(a) for a in call.args]
            kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
            text = PLACEHOLDERS[name](*args, **kwargs)
        except Exception as exc:  # report every failure, never skip silently
            raise PluginError(f"{where}: cannot expand {m.group(0)!r}: {type(exc).__name__}: {exc}") from exc
        indent = line if not line.strip() else ""
        return text.replace("\n", "\n" + indent)

    return TOKEN.sub(replace, markdown)


def on_page_markdown(markdown: str, page, config, files, **kwargs) -> str:
    return expand(markdown, page.file.src_uri)
