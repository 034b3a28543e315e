"""The pictures a run writes, readable: the video's legend and base proposal, units on the
results table and the comparison plot, medians that one outlier does not move."""

import numpy as np
import pytest

from twinloop.cli.common import results_table
from twinloop.tasks import make_task
from twinloop.viz import Ghosts, RenderingUnavailable, gl_backend, render_frames
from twinloop.viz.plots import _final_errors, plot_comparison
from twinloop.viz.video import _BASE, _CHOSEN, draw_legend


@pytest.fixture(scope="module")
def task():
    try:
        gl_backend()
    except RenderingUnavailable as exc:
        pytest.skip(f"no offscreen OpenGL backend: {exc}")
    return make_task("block-push")


def near(img, rgba, tol=40):
    return int((np.abs(img.astype(int) - np.round(255 * np.asarray(rgba[:3]))).sum(-1) < tol).sum())


def test_the_legend_names_each_trace_colour_in_the_corner():
    frame = np.full((240, 320, 3), 90, np.uint8)
    out = draw_legend(frame)
    corner = out[:80, :80]
    assert near(corner, _CHOSEN) > 10 and near(corner, _BASE) > 10
    assert near(frame[:80, :80], _CHOSEN) == 0
    assert (out[120:] == frame[120:]).all()  # only the corner


def test_the_video_draws_the_base_proposal_in_its_own_colour(task):
    q = task.initial_state(np.random.default_rng(0))[: task.model.nq]
    s = np.linspace(0, 0.15, 6)[:, None]
    trace = (q[:2] + s * [1.0, 0.0])[None]
    (plain,) = render_frames(task, None, q[None], ghosts=[Ghosts(np.empty((0, 2, 2)))], width=160, height=160)
    (img,) = render_frames(task, None, q[None], ghosts=[Ghosts(np.empty((0, 2, 2)), base=trace)], width=160, height=160)
    changed = np.any(np.abs(img.astype(int) - plain.astype(int)) > 30, axis=-1)
    r, g, b = (img[changed].astype(int)[:, i] for i in range(3))
    assert changed.sum() > 20 and np.median(g - np.maximum(r, b)) > 20  # drawn, and green


def summary(errors, unit="m"):
    eps = {n: [{"final_error": e} for e in v] for n, v in errors.items()}
    return {"task": "push-t", "world": "shifted", "seed": 0, "episodes": 3, "error_unit": unit,
            "results": [{"controller": n, "success_rate": 0.5, "success_ci": [0.1, 0.9], "successes": 1,
                         "episodes": len(v), "mean_final_error": float(np.mean(v)), "control_hz": 10.0}
                        for n, v in errors.items()], "per_episode": eps}


def test_the_results_table_gives_every_column_its_unit():
    table = results_table(summary({"base": [0.1, 0.2, 5.0]}, unit="rad"))
    headers = [c.header for c in table.columns]
    assert "final error (rad, mean)" in headers and "control rate (Hz)" in headers


def test_the_comparison_plot_reads_each_episodes_final_error_for_its_medians(tmp_path):
    s = summary({"base": [0.1, 0.2, 5.0], "refined": [0.1, 0.1, 0.2]})
    per = _final_errors(s, ["base", "refined"])
    assert np.median(per[0]) == pytest.approx(0.2)  # the mean, 1.77, is the outlier's
    assert plot_comparison(s, tmp_path / "c.png").is_file()
    del s["per_episode"]
    assert _final_errors(s, ["base", "refined"]) is None and plot_comparison(s, tmp_path / "d.png").is_file()
