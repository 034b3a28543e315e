"""The live view: ticks published without waiting, the page drawn in a real browser, the
planner tuned from the page, and bad input (a port in use, a closed browser)."""

import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("viser")

from twinloop.errors import TwinloopError  # noqa: E402
from twinloop.run.build import controller_in_world  # noqa: E402
from twinloop.run.compare import RunConfig, run_comparison  # noqa: E402
from twinloop.tasks import make_task  # noqa: E402
from twinloop.viz.browser import Browser, chromium, colour_pixels  # noqa: E402
from twinloop.viz.live import History, LiveView, TickSnapshot, open_view  # noqa: E402
from twinloop.viz.page import Page  # noqa: E402
from twinloop.viz.panels import CANDIDATE, CHOSEN  # noqa: E402

CFG = RunConfig(task="push-t", episodes=1, max_ticks=4, video=False, record=False)


@pytest.fixture(scope="module")
def view(push_t):
    v = open_view(push_t, "127.0.0.1", 0)
    yield v
    v.close()


def _ticks(world, ctl, obs, n):
    for _ in range(n):
        obs, _info = world.step(ctl.act(obs))
    return obs


def test_every_tick_is_published_and_drawn_without_error(view):
    world, ctl = controller_in_world(CFG, "refined", None, view)
    before = view.published
    ctl.reset(1)
    _ticks(world, ctl, world.reset(1), 4)
    deadline = time.time() + 5
    while view._drawn is not view._latest and time.time() < deadline:
        time.sleep(0.02)
    assert view.published - before == 4
    assert view.error == ""
    snap = view._drawn
    assert snap.tick == 4 and snap.roll_qpos is not None and snap.chosen is not None
    assert snap.verdict  # which plan was sent and why


def test_publishing_never_waits_for_a_page_that_stopped_drawing_or_died(push_t):
    v = LiveView(push_t, port=0)
    try:
        os.kill(v.process.pid, signal.SIGSTOP)  # a page that draws nothing for a while
        snap = TickSnapshot("x", 1, push_t.model.qpos0.copy(), None, None, None, None, None, "", History())
        t0 = time.perf_counter()
        for i in range(200):
            v.publish(TickSnapshot(**{**snap.__dict__, "tick": i}))
        assert time.perf_counter() - t0 < 0.1  # 200 ticks handed over: none waited for a frame
        time.sleep(0.3)
        os.kill(v.process.pid, signal.SIGCONT)
        deadline = time.time() + 10
        while (v._drawn is None or v._drawn.tick != 199) and time.time() < deadline:
            time.sleep(0.02)
        assert v._drawn.tick == 199 and v.error == ""
        assert v.drawn <= 2  # the ticks published meanwhile were dropped, not queued
        v.process.kill()  # the page process dies: publishing goes on, without waiting
        v.process.wait(timeout=10)
        t0 = time.perf_counter()
        for i in range(50):
            v.publish(TickSnapshot(**{**snap.__dict__, "tick": 200 + i}))
            time.sleep(0.002)
        assert time.perf_counter() - t0 < 1.0 and v.published == 250
    finally:
        if v.process.poll() is None:
            os.kill(v.process.pid, signal.SIGCONT)
        v.close()


def test_the_page_runs_in_its_own_process_at_a_lower_priority(view):
    assert view.process.poll() is None and view.process.pid != os.getpid()
    assert os.getpriority(os.PRIO_PROCESS, view.process.pid) > os.getpriority(os.PRIO_PROCESS, 0)


def test_a_tick_sends_only_the_history_the_page_has_not_had(view):
    h = History(t=[0.0, 0.1, 0.2], cost=[3.0, 2.0, 1.0], prior_cost=[4.0] * 3, gap=[0.0] * 3, qpos=[np.zeros(2)] * 3)
    snap = TickSnapshot("ep", 3, np.zeros(2), None, None, None, None, None, "", h)
    view._history_sent = ("ep", 2)
    wire = view._wire(snap)
    assert wire.history_from == 2 and wire.history.cost == [1.0] and snap.history.cost == [3.0, 2.0, 1.0]
    assert view._wire(replace(snap, episode="next")).history_from == 0  # a new episode starts over


def test_the_page_sends_its_controls_back_and_acknowledges_each_tick_it_draws(push_t):
    ours, theirs = multiprocessing.Pipe()
    page = Page(theirs, push_t, "127.0.0.1", 0, 30.0)
    try:
        page.panel._request("num_samples", 8)  # what moving the page's K control does
        assert ours.recv() == ("tune", ("num_samples", 8))
        q = push_t.model.qpos0.copy()
        h = History(t=[0.0, 0.1], cost=[2.0, 1.0], prior_cost=[3.0, 3.0], gap=[0.0, 0.0], qpos=[q, q])
        ours.send(("tick", TickSnapshot("ep", 2, q, None, None, None, None, None, "", h), 7))
        ours.send(("tick", TickSnapshot("ep", 3, q, None, None, None, None, None, "", History(*[[v] for v in
                   (0.2, 0.5, 3.0, 0.0, q)]), history_from=2), 8))
        ours.send(("stop", None))
        page.run()
        assert [ours.recv(), ours.recv()] == [("drawn", 7), ("drawn", 8)]
        assert page.history.cost == [2.0, 1.0, 0.5]  # the second tick brought only its new entry
    finally:
        page.server.stop()


def test_a_task_class_from_a_file_is_served_by_the_page_process(tmp_path):
    path = tmp_path / "my_task.py"
    path.write_text("from twinloop.tasks.push_t import PushT\n\n\nclass MyPush(PushT):\n    name = 'my-push'\n")
    v = open_view(make_task(f"{path}:MyPush"), "127.0.0.1", 0)
    try:
        assert v.process.poll() is None and v.port > 0
    finally:
        v.close()


def test_a_script_without_a_main_guard_can_open_the_view(tmp_path):
    script = tmp_path / "watch.py"
    script.write_text("from twinloop.viz.live import open_view\nv = open_view('push-t', '127.0.0.1', 0)\n"
                      "print('served', v.process.poll() is None)\nv.close()\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.stdout.count("served True") == 1, out.stderr[-2000:]  # started once, not again by the page


def test_tuning_applies_k_at_the_next_tick_and_the_horizon_at_the_next_episode(view):
    world, ctl = controller_in_world(CFG, "refined", None, view)
    hook = ctl.hooks[-1]
    ctl.reset(2)
    obs = _ticks(world, ctl, world.reset(2), 1)
    h0 = ctl.refiner.spec.horizon_ticks
    view.tuning.request("num_samples", 8)
    view.tuning.request("horizon", 0.2)
    _ticks(world, ctl, obs, 1)
    assert ctl.last.result.costs.shape == (8,)
    assert ctl.refiner.spec.horizon_ticks == h0  # not mid-episode
    assert hook.report()["tuned"] == [{"tick": 1, "setting": "num_samples", "value": 8}]
    ctl.reset(3)
    assert ctl.refiner.spec.horizon_ticks == 2
    assert hook.report()["tuned"] == [{"tick": 0, "setting": "horizon", "value": 0.2}]
    view.tuning.request("temperature", -1.0)
    _ticks(world, ctl, world.reset(3), 2)
    assert "temperature" in view.tuning.message and ctl.refiner.optimizer.temperature > 0


def test_a_run_with_the_view_records_its_episodes_as_before(tmp_path):
    s = run_comparison(CFG.__class__(task="push-t", episodes=1, max_ticks=3, video=False, record=False, view=True,
                                     view_port=0, out=str(tmp_path / "v")), log=lambda _m: None)
    plain = run_comparison(CFG.__class__(task="push-t", episodes=1, max_ticks=3, video=False, record=False,
                                         out=str(tmp_path / "p")), log=lambda _m: None)
    assert s["per_episode"]["refined"][0]["tuned"] == []
    assert s["per_episode"]["refined"][0]["final_error"] == plain["per_episode"]["refined"][0]["final_error"]


def test_a_port_in_use_fails_before_the_run_naming_the_port(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cfg = RunConfig(task="push-t", episodes=1, max_ticks=3, video=False, record=False, view=True, view_port=port,
                        out=str(tmp_path / "o"))
        with pytest.raises(TwinloopError, match=f"127.0.0.1:{port}"):
            run_comparison(cfg, log=lambda _m: None)
    assert not (tmp_path / "o" / "summary.json").exists()


# -- the page in a real browser ----------------------------------------------------------------

@pytest.mark.skipif(chromium() is None and not os.environ.get("TWINLOOP_REQUIRE_BROWSER"),
                    reason="no chromium (CI installs it: .ci/run)")
def test_the_page_draws_the_ghost_traces_and_control_goes_on_when_the_browser_closes(view):
    world, ctl = controller_in_world(CFG, "refined", None, view)
    ctl.reset(4)
    obs = _ticks(world, ctl, world.reset(4), 3)
    browser = Browser(view.url)
    try:
        deadline, img = time.time() + 12, None
        while time.time() < deadline:
            img = browser.screenshot()
            if colour_pixels(img, CHOSEN) > 30 and colour_pixels(img, CANDIDATE) > 30:
                break
            time.sleep(0.2)
    finally:
        browser.close()  # the page goes away mid-episode
    assert colour_pixels(img, CHOSEN) > 30, "the plan sent is not drawn"
    assert colour_pixels(img, CANDIDATE) > 30, "the candidates are not drawn"
    n = view.published
    _ticks(world, ctl, obs, 2)
    assert view.published == n + 2 and view.error == ""


# -- a recorded dataset replayed ---------------------------------------------------------------

@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Refined push-t episodes recorded in the nominal world and in a shifted one."""
    root = tmp_path_factory.mktemp("replay")
    for world in ("nominal", "shifted"):
        run_comparison(RunConfig(task="push-t", world=world, episodes=1, max_ticks=6, video=False,
                                 out=str(root / world)), log=lambda _m: None)
    return {w: root / w / "episodes" / "refined" for w in ("nominal", "shifted")}


def test_the_twins_replay_matches_a_nominal_world_and_parts_from_a_shifted_one(recorded):
    from twinloop.viz.replay import open_dataset, twin_replay, world_qpos

    gaps = {}
    for world, path in recorded.items():
        ds, task = open_dataset(path)
        ep = ds.read(ds.indices[0])
        gaps[world] = np.linalg.norm(world_qpos(ep) - twin_replay(task, ep), axis=1)
    assert gaps["nominal"].max() < 1e-9
    assert gaps["shifted"].max() > 1e-3


def test_a_dataset_of_another_task_is_refused_naming_both(recorded):
    from twinloop.viz.replay import open_dataset

    with pytest.raises(TwinloopError, match="recorded on task 'push-t', not 'block-push'"):
        open_dataset(recorded["shifted"], "block-push")


def test_scrubbing_the_replay_moves_the_scene_to_that_tick(recorded):
    from twinloop.viz.replay import ReplayView, open_dataset

    page = ReplayView(*open_dataset(recorded["shifted"]), port=0)
    try:
        page.show(5)
        assert np.allclose(page.world.data.qpos, page.q_world[5])
        assert np.allclose(page.twin.data.qpos, page.q_twin[5])
        assert "tick 5" in page.status.content
    finally:
        page.close()
