"""Specification of twinloop.viz: episode videos with ghost rollouts, frames, result plots."""

import imageio.v3 as iio
import numpy as np
import pytest

from twinloop.errors import TwinloopError
from twinloop.tasks import make_task
from twinloop.viz import (
    Ghosts,
    RenderingUnavailable,
    ghosts_from_rollouts,
    gl_backend,
    plot_comparison,
    plot_curves,
    plot_rounds,
    render_episode,
    render_frames,
    save_frame,
)

W, H = 160, 128  # small and not square, so a swapped width/height shows


@pytest.fixture(scope="module")
def task():
    return make_task("block-push")


@pytest.fixture(scope="module")
def gl():
    try:
        return gl_backend()
    except RenderingUnavailable as exc:
        pytest.skip(f"no offscreen OpenGL backend (EGL/OSMesa) on this machine: {exc}")


def episode(task, T=3):
    q0 = task.initial_state(np.random.default_rng(0))[: task.model.nq]
    qs = np.repeat(q0[None], T, axis=0)
    qs[:, 2] += np.linspace(0.0, 0.02, T)  # the block moves a little
    return qs


def fan(origin, n=8, L=6, length=0.15):
    """``(n, L, 2)`` straight traces fanning out from ``origin``."""
    s = np.linspace(0, length, L)[:, None]
    return np.stack([origin + s * [np.cos(a), np.sin(a)] for a in np.linspace(-1, 1, n)])


# -- video -------------------------------------------------------------------------------------


def test_render_episode_with_ghosts_writes_a_decodable_mp4(task, gl, tmp_path):
    qs = episode(task)
    ghosts = [Ghosts(fan(q[:2]), costs=np.arange(8.0), chosen=fan(q[:2])[3:4]) for q in qs]
    path = render_episode(task, None, qs, tmp_path / "ep.mp4", ghosts=ghosts, width=W, height=H)
    assert path.is_file()
    frames = iio.imread(path)
    assert frames.shape == (3, H, W, 3)
    assert [p.name for p in tmp_path.iterdir()] == ["ep.mp4"]  # no temp file left behind


def test_ghosts_change_the_image(task, gl):
    qs = episode(task, T=1)
    (plain,) = render_frames(task, None, qs, width=W, height=H)
    (ghosted,) = render_frames(task, None, qs, ghosts=[fan(qs[0, :2])], width=W, height=H)
    changed = np.any(np.abs(plain.astype(int) - ghosted.astype(int)) > 30, axis=-1)
    assert changed.sum() > 50


def test_default_camera_puts_a_ghost_where_its_xy_trace_is(task, gl):
    # top-down orthographic view: a horizontal trace at y = +0.2 m shows up in the image rows
    # 0.2 m above the centre, whatever height it is drawn at
    m = task.model
    view = 0.6
    y = m.stat.center[1] + 0.2
    chosen = np.array([[[m.stat.center[0] - 0.2, y], [m.stat.center[0] + 0.2, y]]])
    g = Ghosts(np.empty((0, 2, 2)), chosen=chosen)
    qs = episode(task, T=1)
    (plain,) = render_frames(task, None, qs, width=200, height=200, view_size=view)
    (img,) = render_frames(task, None, qs, ghosts=[g], width=200, height=200, view_size=view)
    rows = np.nonzero(np.any(np.abs(img.astype(int) - plain.astype(int)) > 30, axis=-1))[0]
    expected_row = (0.5 - 0.2 / view) * 200
    assert rows.size and abs(np.median(rows) - expected_row) < 4


def test_save_frame_writes_a_png_of_the_requested_size(task, gl, tmp_path):
    q = episode(task, T=1)[0]
    path = save_frame(task, None, q, tmp_path / "f.png", ghosts=fan(q[:2]), width=W, height=H)
    assert iio.imread(path).shape[:2] == (H, W)


def test_render_does_not_change_the_callers_model(task, gl):
    fovy = task.model.vis.global_.fovy
    list(render_frames(task, None, episode(task, T=1), width=W, height=H))
    assert task.model.vis.global_.fovy == fovy and task.model.vis.global_.orthographic == 0


@pytest.mark.parametrize("kw,match", [
    ({"width": 161}, "width must be an even"),
    ({"ghosts": [None] * 5}, "ghosts has 5 frames but qpos_seq has 3"),
    ({"qpos_seq": np.zeros((3, 2))}, "qpos_seq must have shape"),
    ({"ghosts": [np.zeros((4, 3)), None, None]}, "ghosts\\[0\\]"),
])
def test_render_episode_rejects_bad_input_and_writes_nothing(task, tmp_path, kw, match):
    args = {"qpos_seq": episode(task), "width": W, "height": H, **kw}
    qs = args.pop("qpos_seq")
    with pytest.raises(TwinloopError, match=match):
        render_episode(task, None, qs, tmp_path / "bad.mp4", **args)
    assert not any(tmp_path.iterdir())


def test_ghosts_from_rollouts_keeps_the_best_candidates_and_marks_the_chosen_one():
    rng = np.random.default_rng(0)
    K, L = 10, 101
    points = rng.normal(size=(2, K, L, 2, 3))  # (P, K, L, n, 3): the first particle is drawn
    costs = rng.permutation(K).astype(float)
    costs[4] = np.nan  # an unstable rollout is never chosen nor highlighted
    g = ghosts_from_rollouts(points, costs, max_candidates=5, max_points=11, n_best=2)
    assert g.traces.shape == (10, 11, 3) and g.chosen.shape == (2, 11, 3)
    best = int(np.nanargmin(costs))
    np.testing.assert_array_equal(g.chosen[1], points[0, best, ::10, 1])
    np.testing.assert_array_equal(np.sort(g.costs[::2]), np.sort(costs[np.isfinite(costs)])[:5])
    assert g.best_mask().sum() == 4  # 2 best candidates x 2 traced points


def test_ghosts_from_rollouts_rejects_points_without_coordinates():
    with pytest.raises(TwinloopError, match="points must have shape"):
        ghosts_from_rollouts(np.zeros((3, 5, 4)))


def test_task_trace_points_follow_the_pusher_and_the_block(task):
    q = np.array([[0.01, 0.02, -0.1, 0.05, 0.0, 0.0]])
    pts = task.trace_points(q, np.zeros((1, task.model.nsensordata)))
    np.testing.assert_allclose(pts[0, :, :2], [[0.01, 0.02], [-0.1, 0.05]])


# -- plots -------------------------------------------------------------------------------------

SUMMARY = {"task": "block-push", "world": "shifted", "seed": 0, "episodes": 20, "results": [
    {"controller": "base", "success_rate": 0.3, "success_ci": [0.15, 0.52], "mean_final_error": 0.05, "control_hz": 100},
    {"controller": "mppi", "success_rate": 0.8, "success_ci": [0.58, 0.92], "mean_final_error": 0.01, "control_hz": 9.5},
]}


def is_png(path):
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and iio.imread(path).ndim == 3


def test_plot_comparison_writes_a_png(tmp_path):
    assert is_png(plot_comparison(SUMMARY, tmp_path / "c.png"))


def test_plot_comparison_names_a_missing_key(tmp_path):
    bad = {**SUMMARY, "results": [{k: v for k, v in SUMMARY["results"][0].items() if k != "success_ci"}]}
    with pytest.raises(TwinloopError, match=r"summary\['results'\]\[0\] lacks key\(s\) \['success_ci'\]"):
        plot_comparison(bad, tmp_path / "c.png")
    with pytest.raises(TwinloopError, match="'world'"):
        plot_comparison({k: v for k, v in SUMMARY.items() if k != "world"}, tmp_path / "c.png")
    assert not any(tmp_path.iterdir())


def test_plot_curves_writes_a_png_with_bands_and_per_parameter_lines(tmp_path):
    its = [{"round": i, "gap": 1 / (i + 1), "gap_ci": [0.8 / (i + 1), 1.2 / (i + 1)],
            "param_error": {"friction": 0.5 / (i + 1), "mass": 0.3}, "success_rate": 0.2 + 0.1 * i}
           for i in range(4)]
    assert is_png(plot_curves(its, tmp_path / "curves.png"))


def test_plot_curves_names_a_key_no_round_has(tmp_path):
    with pytest.raises(TwinloopError, match=r"no round has key\(s\) \['param_error'\]"):
        plot_curves([{"gap": 1.0, "success_rate": 0.5}], tmp_path / "c.png")


def test_plot_rounds_writes_a_png_and_names_a_missing_key(tmp_path):
    rounds = [{"round": i, "base_success": 0.2 + 0.1 * i, "refined_success": 0.7, "refined_ci": [0.5, 0.85]}
              for i in range(3)]
    assert is_png(plot_rounds(rounds, tmp_path / "r.png"))
    with pytest.raises(TwinloopError, match="refined_success"):
        plot_rounds([{"base_success": 0.2}], tmp_path / "r2.png")


def test_ghosts_given_as_named_groups_are_drawn_like_an_array(task, gl):
    qs = episode(task, T=1)
    p, b = fan(qs[0, :2], n=4), fan(qs[0, 2:4], n=4)
    (as_dict,) = render_frames(task, None, qs, ghosts=[{"pusher": p, "block": b}], width=W, height=H)
    (as_array,) = render_frames(task, None, qs, ghosts=[np.concatenate([p, b])], width=W, height=H)
    np.testing.assert_array_equal(as_dict, as_array)


def test_one_ghost_per_action_leaves_the_final_frame_plain(task, gl):
    qs = episode(task, T=2)
    plain = list(render_frames(task, None, qs, width=W, height=H))
    ghosted = list(render_frames(task, None, qs, ghosts=[fan(qs[0, :2])], width=W, height=H))
    assert np.any(ghosted[0] != plain[0])
    np.testing.assert_array_equal(ghosted[1], plain[1])
