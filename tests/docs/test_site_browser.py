"""Build the documentation site and look at the E2M1 page in headless Chromium.

Skipped when mkdocs or Chromium is missing, unless the environment variable CI is set, in
which case a missing tool is a failure.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import os
import shutil
import subprocess
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser")


def require(condition: bool, reason: str) -> None:
    if condition:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (required because CI is set)")
    pytest.skip(reason)


def find_chromium() -> str | None:
    for candidate in CHROMIUM_CANDIDATES:
        path = shutil.which(candidate)
        if path:
            return path
    return None


class Tables(HTMLParser):
    """Collect every <table> as a list of rows, each row a list of cell texts."""

    def __init__(self):
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._depth = 0
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self._depth += 1
            if self._depth == 1:
                self.tables.append([])
        elif tag == "tr" and self._depth == 1:
            self.tables[-1].append([])
        elif tag in ("td", "th") and self._depth == 1:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "table":
            self._depth -= 1
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    require(importlib.util.find_spec("mkdocs") is not None, "mkdocs is not installed")
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return out


@pytest.fixture(scope="module")
def server(site):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    exe = find_chromium()
    require(exe is not None, "Chromium is not installed (apt-get install chromium)")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'chromium-profile'}"]
    return subprocess.run([exe, *flags, *args], capture_output=True, text=True, timeout=180)


def test_e2m1_page_shows_the_full_code_table(server, tmp_path):
    proc = chromium(tmp_path, "--dump-dom", f"{server}/formats/e2m1/")
    assert proc.returncode == 0, proc.stderr[-2000:]
    parser = Tables()
    parser.feed(proc.stdout)
    code_tables = [t for t in parser.tables
                   if any(row[:1] == ["0x7"] and "6" in row for row in t)
                   and t and t[0][:2] == ["code", "sign"]]
    assert code_tables, "no table with the row 0x7 -> 6 on the E2M1 page"
    table = code_tables[0]
    assert len(table) == 1 + 16, f"expected a header and 16 code rows, got {len(table)} rows"
    assert [row[0] for row in table[1:]] == [f"0x{c:X}" for c in range(16)]
    assert table[8][4] == "6" and table[9][4] == "-0"


def test_e2m1_page_screenshot(server, tmp_path):
    shot = tmp_path / "e2m1.png"
    proc = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,2000",
                    "--hide-scrollbars", f"{server}/formats/e2m1/")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert shot.exists() and shot.stat().st_size > 0
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
