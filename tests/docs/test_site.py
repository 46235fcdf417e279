"""The documentation site builds, renders in a headless browser without a console error, and
its search finds ``DataLoader``.

The site is built from ``mkdocs.yml`` into a temporary folder (as ``make docs`` builds it into
``site/``), served on 127.0.0.1 by ``http.server`` in a thread, and opened in Debian's
Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: no
browser-automation package needed). Skips where /usr/bin/chromium is not installed.
"""

from __future__ import annotations

import fcntl
import functools
import html
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--remote-debugging-pipe"]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                          str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stderr[-4000:]}"
    return out


@pytest.fixture(scope="module")
def server(site):
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, name="docs-http", daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=10)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (http.server's signature)
        pass


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install -y chromium; "
                    "`make install` does it where it can)")
    client = _Browser(tmp_path_factory.mktemp("chromium-profile"))
    yield client
    client.close()


def _above_four(fd: int) -> int:
    """``fd`` moved to a number above 4 (the original closed)."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


class _Browser:
    """Chromium over the DevTools protocol on fds 3 (commands in) and 4 (replies out)."""

    def __init__(self, profile: Path):
        cmd_r, self._cmd_w = os.pipe()
        self._out_r, out_w = os.pipe()
        cmd_r, out_w = _above_four(cmd_r), _above_four(out_w)  # 3 and 4 are the browser's
        # bash, not sh: dash's redirections take single-digit descriptors only
        script = f'exec "$0" "$@" 3<&{cmd_r} 4>&{out_w} {cmd_r}<&- {out_w}>&-'
        self._proc = subprocess.Popen(
            ["bash", "-c", script, str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}",
             "about:blank"], pass_fds=(cmd_r, out_w), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(out_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self._page = self.call("Target.attachToTarget", targetId=target,
                               flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", page=True)

    def call(self, method: str, page: bool = False, timeout: float = 30.0, **params) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if page:
            message["sessionId"] = self._page
        os.write(self._cmd_w, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("Chromium sent no reply in time")
            chunk = os.read(self._out_r, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def open(self, url: str, settle: float = 1.0) -> None:
        """Navigate, wait for the load event, then ``settle`` seconds for late scripts."""
        self.events.clear()
        self.call("Page.navigate", page=True, url=url)
        deadline = time.monotonic() + 30
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self.events.append(self._read(deadline))
        self.wait(settle)

    def wait(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:  # keep reading: events arrive as they happen
            self.evaluate("1")
            time.sleep(0.1)

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", page=True, expression=expression,
                           returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def console_errors(self) -> list[str]:
        errors = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                errors.append(details.get("exception", {}).get("description")
                              or details.get("text", "exception"))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error",
                                                                                   "assert"):
                errors.append(" ".join(str(a.get("value", a.get("description", "")))
                                       for a in params.get("args", [])))
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                entry = params["entry"]
                errors.append(f"{entry['text']} ({entry.get('url', '')})")
        return errors

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._cmd_w)
        os.close(self._out_r)


@pytest.mark.slow
def test_home_page_renders_without_console_errors(server, browser):
    browser.open(f"{server}/")
    assert browser.console_errors() == []
    assert browser.evaluate("document.title").startswith("fastload")
    text = browser.evaluate("document.querySelector('article').innerText")
    assert "fastload.DataLoader" in text and "GPU status" in text
    assert browser.evaluate(  # the chart the home page shows is served
        "[...document.images].every(i => i.complete && i.naturalWidth > 0)")


def test_dataloader_api_page_renders_every_parameter(server, browser):
    browser.open(f"{server}/reference/api/")
    assert browser.console_errors() == []
    text = browser.evaluate("document.querySelector('article').innerText")
    assert "fastload.DataLoader" in text
    import inspect

    import fastload
    for obj in (fastload.DataLoader, fastload.LMDBDataset, fastload.StallMeter):
        for name in inspect.signature(obj).parameters:
            assert name in text, f"the API page lacks {obj.__name__}'s parameter {name!r}"


def test_search_index_holds_the_dataloader_page(site):
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    hits = [d["location"] for d in index["docs"] if "DataLoader" in html.unescape(d["text"])
            or "DataLoader" in d["title"]]
    assert any(location.startswith("reference/api/") for location in hits), hits[:10]


def test_site_search_finds_dataloader_in_the_browser(server, browser):
    browser.open(f"{server}/?q=DataLoader", settle=0.5)
    deadline = time.monotonic() + 30
    results = []
    while time.monotonic() < deadline:
        results = browser.evaluate(
            "[...document.querySelectorAll('.md-search-result__item')].map(e => e.innerText)")
        if results:
            break
        browser.wait(0.3)
    assert any(re.search(r"DataLoader", r) for r in results), results[:5]
    assert browser.console_errors() == []
