"""A cap on how many frames a second the live view's page draws.

viser's page draws on demand, but each scene update opens a quarter-second window in which it
draws every frame the browser allows (its client's ``RENDER_SETTLE_MS``); at four or more
updates a second the windows overlap and the page draws continuously, as fast as the browser's
cores let it. Without a GPU (WebGL in software) every one of those frames is drawn by the CPU,
and the page takes all the cores it can get. viser 1.1 offers no setting for this, so the page
is served with a short script ahead of viser's own (:data:`FRAME_CAP_JS`): the page's animation
frames (``requestAnimationFrame``, which its renderer draws in) come at most ``fps`` times a
second, every callback asked for meanwhile run together in the next one. Updates still show at
the next frame; only frames beyond the cap are not drawn.

The script goes in a copy of viser's page (its ``client/build/index.html``, one self-contained
file) served in place of the original by this process's viser server; a viser whose page or
server is laid out otherwise is served as it is (:func:`serve` says so).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from twinloop.errors import number

#: most frames a second the live view's page draws (above its update rate, 10-20 a second)
FRAME_CAP = 15.0

#: runs before the page's own scripts; ``__FPS__`` is replaced by the cap
FRAME_CAP_JS = """(() => {
  const period = 1000 / __FPS__, raf = window.requestAnimationFrame.bind(window);
  let queue = new Map(), next = 1, last = -Infinity, pending = false;
  const fire = (t) => {
    pending = false;
    last = performance.now();
    const due = queue;
    queue = new Map();
    for (const cb of due.values()) {
      try { cb(t); } catch (e) { setTimeout(() => { throw e; }); }
    }
  };
  const schedule = () => {
    if (pending) return;
    pending = true;
    const wait = last + period - performance.now() - 4;  // a frame's own wait for the display
    if (wait > 0) setTimeout(() => raf(fire), wait); else raf(fire);
  };
  window.requestAnimationFrame = (cb) => { const id = next++; queue.set(id, cb); schedule(); return id; };
  window.cancelAnimationFrame = (id) => { queue.delete(id); };
})();"""


def capped_page(viser, fps: float, folder: Path) -> Path:
    """Write viser's page with the frame cap at ``fps`` ahead of its scripts into ``folder``
    (returned); a ``ValueError`` where viser's page is not where or what this expects."""
    stock = Path(viser.__file__).parent / "client" / "build" / "index.html"
    html = stock.read_text(encoding="utf-8")
    head = html.find("<head>")
    if head < 0:
        raise ValueError(f"{stock} has no <head>")
    script = f"<script>{FRAME_CAP_JS.replace('__FPS__', repr(float(fps)))}</script>"
    at = head + len("<head>")
    (folder / "index.html").write_text(html[:at] + script + html[at:], encoding="utf-8")
    return folder


class Served:
    """A viser server whose page draws at most ``fps`` frames a second (``None``: viser's page
    as it is). :attr:`capped` says whether the cap is in the page served, :attr:`why_not` why not."""

    def __init__(self, viser, fps: float | None, **kwargs):
        self.folder, self.capped, self.why_not = None, False, ""
        make = viser.infra.WebsockServer
        if fps is not None:
            number(fps, "view frame cap (frames/s)", low=0, low_open=True)
            try:
                self.folder = capped_page(viser, fps, Path(tempfile.mkdtemp(prefix="twinloop-view-")))
            except (OSError, ValueError, UnicodeDecodeError) as exc:
                self.why_not = f"viser's page could not be capped: {exc}"

        def server_at_folder(*args, **kw):  # viser's server, serving the capped page's folder
            kw["http_server_root"] = self.folder
            return make(*args, **kw)

        if self.folder is not None:
            viser.infra.WebsockServer = server_at_folder
        try:
            self.server = viser.ViserServer(**kwargs)
        finally:
            viser.infra.WebsockServer = make
        self.capped = self.folder is not None and self.server._websock_server._http_server_root == self.folder
        if self.folder is not None and not self.capped:
            self.why_not = "this viser builds its server otherwise: its page is served as it is"

    def stop(self) -> None:
        self.server.stop()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
