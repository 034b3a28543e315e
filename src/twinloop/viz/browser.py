"""Headless Chromium driven over its DevTools protocol: screenshots of the live view's page
(the tests' check that the scene and the ghost traces are drawn, the docs' picture).

Chromium comes from the system packages (``apt-get install chromium``); WebGL runs in software
(SwiftShader: ``--use-angle=swiftshader --enable-unsafe-swiftshader``), so no GPU or display
is needed. The protocol is spoken over ``websockets``, which viser already installs.
"""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess
import tempfile
import threading
import urllib.request

import imageio.v2 as imageio
import numpy as np

from twinloop.errors import TwinloopError

#: wraps the page's WebGL contexts to count the frames drawn (``clear`` calls) and draw calls
COUNT_GL = """(() => {
  if (!window.__twinloopGl) {
    window.__twinloopGl = {frames: 0, draws: 0};
    for (const C of [WebGLRenderingContext, WebGL2RenderingContext]) {
      const p = C.prototype, clear = p.clear;
      p.clear = function (...a) { window.__twinloopGl.frames++; return clear.apply(this, a); };
      for (const m of ["drawArrays", "drawElements", "drawArraysInstanced", "drawElementsInstanced"]) {
        const f = p[m];
        if (f) p[m] = function (...a) { window.__twinloopGl.draws++; return f.apply(this, a); };
      }
    }
  }
  return JSON.stringify(window.__twinloopGl);
})()"""


def chromium() -> str | None:
    """The Chromium executable on ``PATH`` (``chromium`` or ``chromium-browser``), or ``None``."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """Headless Chromium showing ``url`` in a ``width`` x ``height`` window, driven over its
    DevTools protocol (software WebGL: SwiftShader), ``nice`` steps below this process's
    scheduling priority (0: the same), with ``flags``: further command-line switches."""

    def __init__(self, url: str, width: int = 800, height: int = 560, nice: int = 0, flags=()):
        from websockets.sync.client import connect

        exe = chromium()
        if exe is None:
            raise TwinloopError("no chromium on PATH: apt-get install chromium")
        self.profile = tempfile.mkdtemp()
        lower = ["nice", "-n", str(int(nice))] if nice else []
        self.proc = subprocess.Popen(
            [*lower, exe, "--headless=new", "--no-sandbox", "--use-gl=angle", "--use-angle=swiftshader",
             "--enable-unsafe-swiftshader", f"--window-size={width},{height}", "--remote-debugging-port=0",
             f"--user-data-dir={self.profile}", *flags, url], stderr=subprocess.PIPE, text=True)
        for line in self.proc.stderr:
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if m:
                break
        else:
            raise TwinloopError("chromium did not start its DevTools server")
        # keep reading its log, so that a full pipe never stalls the browser
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()
        tabs = json.load(urllib.request.urlopen(f"http://127.0.0.1:{m.group(1)}/json"))
        self.ws = connect(next(t for t in tabs if t["type"] == "page")["webSocketDebuggerUrl"], max_size=2**26)
        self.n = 0

    def command(self, method: str, **params) -> dict:
        """Send one DevTools protocol command to the page and return its result (events that
        arrive meanwhile are dropped); a :class:`TwinloopError` carries the browser's error."""
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.n:
                if "error" in msg:
                    raise TwinloopError(f"chromium refused {method}: {msg['error'].get('message', msg['error'])}")
                return msg["result"]

    def gl_counts(self) -> dict[str, int]:
        """``{"frames", "draws"}``: the WebGL frames (``clear`` calls) and draw calls the page has
        made since the first call of this (which starts counting; the page's renderer clears
        once a frame)."""
        res = self.command("Runtime.evaluate", expression=COUNT_GL, returnByValue=True)
        return json.loads(res["result"]["value"])

    def screenshot(self) -> np.ndarray:
        """``(H, W, 3)`` uint8 pixels of the page as it is drawn now."""
        data = self.command("Page.captureScreenshot", format="png")["data"]
        return imageio.imread(io.BytesIO(base64.b64decode(data)))[..., :3]

    def close(self) -> None:
        """Close the page and end the browser."""
        self.ws.close()
        self.proc.terminate()
        self.proc.wait(timeout=10)
        shutil.rmtree(self.profile, ignore_errors=True)


def colour_pixels(img: np.ndarray, rgb, tol: int = 60) -> int:
    """Pixels of the 3-D canvas (left of the page's panel) within ``tol`` (L1) of ``rgb``."""
    canvas = img[:, : int(img.shape[1] * 0.6)].astype(int)
    return int((np.abs(canvas - np.array(rgb)).sum(-1) < tol).sum())
