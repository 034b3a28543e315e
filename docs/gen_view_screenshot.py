"""Regenerate docs/assets/view.png: the live view's page during a push-t episode, as headless
Chromium draws it (needs the ``view`` extra and Chromium: ``apt-get install chromium``).

    python docs/gen_view_screenshot.py
"""

from __future__ import annotations

import time
from pathlib import Path

import imageio.v2 as imageio

from twinloop.run.build import controller_in_world
from twinloop.run.compare import RunConfig
from twinloop.tasks import make_task
from twinloop.viz.browser import Browser, colour_pixels
from twinloop.viz.live import open_view
from twinloop.viz.panels import CANDIDATE, CHOSEN

OUT = Path(__file__).parent / "assets" / "view.png"


def main(ticks: int = 12, seed: int = 0) -> None:
    cfg = RunConfig(task="push-t", episodes=1, video=False, record=False)
    view = open_view(make_task("push-t"), "127.0.0.1", 0)
    try:
        world, ctl = controller_in_world(cfg, "refined", None, view)
        ctl.reset(seed)
        obs = world.reset(seed)
        for _ in range(ticks):
            obs, _info = world.step(ctl.act(obs))
        browser = Browser(view.url, 1200, 760)
        try:
            deadline, img = time.time() + 60, None
            while time.time() < deadline:
                time.sleep(1.0)
                img = browser.screenshot()
                if colour_pixels(img, CHOSEN) > 30 and colour_pixels(img, CANDIDATE) > 30:
                    break
        finally:
            browser.close()
    finally:
        view.close()
    imageio.imwrite(OUT, img)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
