"""A minimal headless Chromium driver over the DevTools pipe (no packages beyond the standard library).

`costspec report`'s pages are checked and photographed at a given viewport width: Chromium's own
`--window-size` cannot go below 500 px in headless mode, so a phone-sized viewport (390 px) is set
with the DevTools protocol (`Emulation.setDeviceMetricsOverride`), spoken over
`--remote-debugging-pipe` (file descriptors 3 and 4, NUL-terminated JSON messages).

    with Browser() as browser:
        page = browser.open(Path("report.html"), width=390)
        page.evaluate("document.documentElement.scrollWidth")
        page.screenshot(Path("shot.png"))
        page.errors()  # what the tab reported as an error: uncaught exceptions, console and log errors

Used by the browser tests (tests/export/) and tools/report_screenshots.py.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome") or ""
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-extensions", "--mute-audio",
         "--hide-scrollbars", "--remote-debugging-pipe"]


class BrowserError(RuntimeError):
    """Chromium could not be started, closed the pipe, or answered a command with an error."""


class Browser:
    """One headless Chromium process; `open` gives a page at a viewport size."""

    def __init__(self, timeout: float = 60.0):
        if not CHROMIUM:
            raise BrowserError("headless Chromium is not installed (apt-get install chromium)")
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="costspec-chromium-")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def wire() -> None:  # in the child: its fd 3 reads our commands, fd 4 writes its answers
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)  # dup2 from a different fd clears close-on-exec
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.process = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                        preexec_fn=wire, close_fds=False, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []  # the DevTools events received so far, in order

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (BrowserError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._to_chrome, self._from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """Send one DevTools command and return its result (events in between are kept in `events`)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        try:
            os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        except BrokenPipeError:
            raise BrowserError("Chromium closed the DevTools pipe") from None
        deadline = time.monotonic() + self.timeout
        while True:
            while b"\0" not in self._buffer:
                if time.monotonic() > deadline:
                    raise BrowserError(f"no answer to {method} within {self.timeout:g} s")
                chunk = os.read(self._from_chrome, 1 << 20)
                if not chunk:
                    raise BrowserError("Chromium closed the DevTools pipe")
                self._buffer += chunk
            raw, _, self._buffer = self._buffer.partition(b"\0")
            answer = json.loads(raw)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise BrowserError(f"{method}: {answer['error'].get('message', answer['error'])}")
                return answer.get("result", {})
            if "method" in answer:
                self.events.append(answer)

    def open(self, path: Path, width: int, height: int = 900) -> "Page":
        """`path` (an HTML file) loaded in a new tab whose viewport is `width` x `height` CSS pixels; the tab
        reports its exceptions and console / log messages (`Page.errors`) from before the page loads."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session, target)
        page.send("Runtime.enable")
        page.send("Log.enable")
        page.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        url = Path(path).resolve().as_uri()
        page.send("Page.navigate", {"url": url})
        page.wait_for(f"location.href === {json.dumps(url)} && document.readyState === 'complete'")
        return page


class Page:
    """A tab: evaluate JavaScript in it, take a screenshot of the whole page, read its errors, close it."""

    def __init__(self, browser: Browser, session: str, target: str):
        self.browser, self.session, self.target = browser, session, target

    def send(self, method: str, params: dict | None = None) -> dict:
        return self.browser.send(method, params, self.session)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (JSON-serialisable values only)."""
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            detail = result["exceptionDetails"]
            raise BrowserError(f"{expression[:80]!r}: {detail.get('exception', {}).get('description', detail)}")
        return result["result"].get("value")

    def errors(self) -> list[str]:
        """The tab's uncaught exceptions, console.error calls and error-level log entries (failed loads,
        violations), as text, in the order the tab reported them."""
        out = []
        for event in self.browser.events:
            if event.get("sessionId") != self.session:
                continue
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.exceptionThrown":
                detail = params["exceptionDetails"]
                out.append(detail.get("exception", {}).get("description") or detail.get("text", "exception"))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                out.append(params["entry"].get("text", ""))
        return out

    def close(self) -> None:
        """Close the tab (the browser stays open)."""
        self.browser.send("Target.closeTarget", {"targetId": self.target})

    def wait_for(self, condition: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.evaluate(f"Boolean({condition})"):
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out waiting for {condition}")
            time.sleep(0.05)

    def screenshot(self, path: Path) -> tuple[int, int]:
        """A PNG of the whole page at the viewport's width; returns its (width, height) in pixels."""
        width, height = self.evaluate("[document.documentElement.clientWidth, "
                                      "Math.ceil(document.documentElement.scrollHeight)]")
        shot = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                    "clip": {"x": 0, "y": 0, "width": width, "height": height,
                                                             "scale": 1}})
        data = base64.b64decode(shot["data"])
        Path(path).write_bytes(data)
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
