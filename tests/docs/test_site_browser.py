"""Build the documentation site and look at it in headless Chromium, offline.

Skipped when mkdocs or Chromium is missing, unless the environment variable CI is set, in
which case a missing tool is a failure.

Offline: every page is loaded (in one Chromium run, through a harness page of iframes) with
Chromium's proxy pointed at a local recorder that answers every request with 403; a page that
asks for anything outside the site -- a CDN script, a web font -- fails the test with the URL.
The pages with diagrams must show them rendered (Mermaid shipped with the site), not as raw
``flowchart`` text.
"""

from __future__ import annotations

import functools
import http.server
import json
import re
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


# -- offline: no page requests anything outside the site --------------------------------------------

class _Recorder(http.server.BaseHTTPRequestHandler):
    """A proxy that records every request and refuses it."""

    seen: list = []

    def _refuse(self):
        type(self).seen.append(f"{self.command} {self.path}")
        self.send_response(403)
        self.end_headers()

    do_GET = do_POST = do_HEAD = do_CONNECT = do_OPTIONS = _refuse

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def recorder():
    _Recorder.seen = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1], _Recorder.seen
    httpd.shutdown()
    httpd.server_close()


#: Hosts Chromium itself talks to (updates, sign-in, autofill, hints): not requested by a page.
BROWSER_SERVICES = re.compile(r"^(?:\w+ )?(?:https?://)?(update|clients\d|accounts|content-autofill|optimizationguide-pa|"
                              r"safebrowsing\w*|clientservices|redirector)\.(?:googleapis|google)\.com[:/]")


def _pages(site: Path) -> list[str]:
    rels = (p.parent.relative_to(site).as_posix() for p in site.rglob("index.html"))
    return sorted("/" if rel == "." else f"/{rel}/" for rel in rels)


HARNESS = """<!doctype html><html><body><pre id="out">running</pre><script>
const pages = %s;
const results = [];
function visit(url) {
  return new Promise(done => {
    const f = document.createElement("iframe");
    f.style.width = "1280px"; f.style.height = "900px";
    f.onload = () => setTimeout(() => {
      const d = f.contentDocument;
      results.push({url: url, pre: d.querySelectorAll("pre.mermaid").length,
                    rendered: d.querySelectorAll("div.mermaid").length,
                    raw: d.body.innerText.includes("flowchart TB") || d.body.innerText.includes("flowchart LR")});
      f.remove(); done();
    }, 4000);
    f.src = url; document.body.appendChild(f);
  });
}
(async () => { for (const p of pages) { await visit(p); } document.getElementById("out").textContent = JSON.stringify(results); })();
</script></body></html>"""


def test_static_pages_reference_nothing_outside_the_site(site):
    tag = re.compile(r"<(?:script|link|img|iframe|source|video|audio)\b[^>]*>", re.IGNORECASE)
    url = re.compile(r"""\b(?:src|href)=["']((?:https?:)?//[^"']+)""", re.IGNORECASE)
    found = {}
    for page in site.rglob("*.html"):
        for t in tag.findall(page.read_text(encoding="utf-8", errors="replace")):
            if re.search(r"""rel=["']?(canonical|alternate)""", t):  # metadata, never fetched
                continue
            for u in url.findall(t):
                found.setdefault(u, str(page.relative_to(site)))
    for css in site.rglob("*.css"):
        for u in re.findall(r"url\(\s*['\"]?((?:https?:)?//[^'\")]+)", css.read_text(encoding="utf-8", errors="replace")):
            found.setdefault(u, str(css.relative_to(site)))
    assert not found, f"pages load resources from outside the site: {found}"


def test_every_page_loads_offline_and_renders_its_diagrams(site, server, recorder, tmp_path):
    port, seen = recorder
    pages = _pages(site)
    assert "/" in pages and "/schemes/mx/" in pages and len(pages) > 20
    (site / "_offline_check.html").write_text(HARNESS % json.dumps(pages))
    proc = chromium(tmp_path, f"--proxy-server=http://127.0.0.1:{port}", "--virtual-time-budget=900000",
                    "--disable-features=AutofillServerCommunication,OptimizationHints,MediaRouter",
                    "--dump-dom", f"{server}/_offline_check.html")
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = re.search(r'<pre id="out">(.*?)</pre>', proc.stdout, re.DOTALL)
    assert m and m.group(1) != "running", proc.stdout[-2000:]
    results = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert len(results) == len(pages)
    pages_asked = [r for r in seen if not BROWSER_SERVICES.match(r)]
    assert not pages_asked, f"pages requested resources outside the site (refused by the recording proxy): {pages_asked}"
    with_diagrams = {r["url"]: r for r in results if r["pre"] or r["rendered"]}
    assert {"/schemes/mx/", "/schemes/nvfp4/"} <= set(with_diagrams), sorted(with_diagrams)
    for url, r in with_diagrams.items():
        assert r["pre"] == 0 and r["rendered"] > 0 and not r["raw"], f"{url}: diagram not rendered: {r}"
