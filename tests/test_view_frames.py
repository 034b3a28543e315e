"""The live view's page draws at most its frame cap a second: the cap's script is in the page
served, ahead of viser's, and in a real browser the page draws fewer frames than viser's own
page while the same ticks arrive."""

import os
import threading
import time
import urllib.request

import numpy as np
import pytest

viser = pytest.importorskip("viser")

from twinloop.errors import TwinloopError  # noqa: E402
from twinloop.viz.browser import Browser, chromium  # noqa: E402
from twinloop.viz.frames import Served, capped_page  # noqa: E402
from twinloop.viz.live import History, TickSnapshot, open_view  # noqa: E402


def test_the_capped_page_is_viser_s_with_the_cap_first_in_its_head(tmp_path):
    page = (capped_page(viser, 12.5, tmp_path) / "index.html").read_text()
    stock = (os.path.join(os.path.dirname(viser.__file__), "client", "build", "index.html"))
    with open(stock, encoding="utf-8") as f:
        original = f.read()
    head = page.index("<head>") + len("<head>")
    assert page[head:].startswith("<script>") and "1000 / 12.5" in page[head:head + 200]
    script_end = page.index("</script>", head) + len("</script>")
    assert page[:head] + page[script_end:] == original  # viser's page otherwise untouched


def test_the_server_serves_the_capped_page_and_removes_it_when_stopped():
    served = Served(viser, 15.0, host="127.0.0.1", port=0, verbose=False)
    try:
        assert served.capped and served.why_not == ""
        html = urllib.request.urlopen(f"http://127.0.0.1:{served.server.get_port()}/", timeout=10).read().decode()
        assert "1000 / 15.0" in html
    finally:
        served.stop()
    assert not served.folder.exists()


def test_a_bad_cap_is_refused_and_no_cap_serves_viser_s_page():
    with pytest.raises(TwinloopError, match="frame cap"):
        Served(viser, 0.0, host="127.0.0.1", port=0, verbose=False)
    served = Served(viser, None, host="127.0.0.1", port=0, verbose=False)
    try:
        assert not served.capped and served.folder is None
        html = urllib.request.urlopen(f"http://127.0.0.1:{served.server.get_port()}/", timeout=10).read().decode()
        assert "requestAnimationFrame = (cb)" not in html
    finally:
        served.stop()


def _frames_per_s(push_t, max_fps, seconds: float = 4.0) -> float:
    """Frames a second a headless Chromium draws of the view's page while ticks (the scene's
    bodies moving) arrive at 25 a second."""
    view = open_view(push_t, "127.0.0.1", 0, max_fps=max_fps)
    browser = Browser(view.url)
    stop = threading.Event()

    def stream():
        q0, i = push_t.model.qpos0.copy(), 0
        while not stop.is_set():
            i += 1
            view.publish(TickSnapshot("ep", i, q0 + 1e-3 * np.sin(0.3 * i), None, None, None, None, None, "",
                                      History()))
            time.sleep(0.04)

    thread = threading.Thread(target=stream, daemon=True)
    try:
        time.sleep(6.0)  # the page loads
        f0 = browser.gl_counts()["frames"]
        thread.start()
        time.sleep(seconds)
        f1 = browser.gl_counts()["frames"]
        assert view.error == "" and not view.frame_cap_missing
        return (f1 - f0) / seconds
    finally:
        stop.set()
        thread.join(timeout=5)
        browser.close()
        view.close()


@pytest.mark.skipif(chromium() is None and not os.environ.get("TWINLOOP_REQUIRE_BROWSER"),
                    reason="no chromium (CI installs it: .ci/run)")
def test_in_a_browser_the_page_draws_at_most_its_cap_while_viser_s_draws_more(push_t):
    capped = _frames_per_s(push_t, 5.0)
    assert 1.0 <= capped <= 6.5  # the updates are drawn, at most ~5 frames a second
    assert _frames_per_s(push_t, None) > 6.5  # viser's own page draws more of the same ticks
