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


def chromium() -> str | None:
    """The Chromium executable on ``PATH`` (``chromium`` or ``chromium-browser``), or ``None``."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """Headless Chromium showing ``url`` in a ``width`` x ``height`` window, driven over its
    DevTools protocol (software WebGL: SwiftShader), ``nice`` steps below this process's
    scheduling priority (0: the same)."""

    def __init__(self, url: str, width: int = 800, height: int = 560, nice: int = 0):
        from websockets.sync.client import connect

        exe = chromium()
        if exe is None:
            raise TwinloopError("no chromium on PATH: apt-get install chromium")
        self.profile = tempfile.mkdtemp()
        lower = ["nice", "-n", str(int(nice))] if nice else []
        self.proc = subprocess.Popen(
            [*lower, exe, "--headless=new", "--no-sandbox", "--use-gl=angle", "--use-angle=swiftshader",
             "--enable-unsafe-swiftshader", f"--window-size={width},{height}", "--remote-debugging-port=0",
             f"--user-data-dir={self.profile}", url], stderr=subprocess.PIPE, text=True)
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

    def screenshot(self) -> np.ndarray:
        """``(H, W, 3)`` uint8 pixels of the page as it is drawn now."""
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": "Page.captureScreenshot", "params": {"format": "png"}}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.n:
                return imageio.imread(io.BytesIO(base64.b64decode(msg["result"]["data"])))[..., :3]

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
