"""The RSR loop: per-iteration records, summary, and resuming a killed loop."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from twinloop.calib import CalibConfig, GapConfig
from twinloop.control import RefinerConfig
from twinloop.errors import TwinloopError
from twinloop.run.rsr import RSRConfig, RSRLoop, run_rsr

TINY = RSRConfig(rounds=2, episodes=1, eval_episodes=1, max_ticks=8,
                 calib=CalibConfig(method="cma", max_evals=20, errors_in_variables=False, delay_steps=None),
                 refiner=RefinerConfig(num_samples=8, horizon=0.3), particles=2,
                 params=("block_friction", "block_mass"), beta=0.05)
COMPARED = ("round", "gap", "gap_ci", "param_error", "success_rate", "estimate")


def _strip(summary):
    return [{k: it[k] for k in COMPARED} for it in summary["rounds"]]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return run_rsr(TINY, tmp_path_factory.mktemp("full"))


def test_summary_has_the_shared_schema_and_one_record_per_round(uninterrupted):
    s = uninterrupted.summary
    assert {"task", "world", "seed", "episodes", "results", "rounds"} <= set(s)
    assert [it["round"] for it in s["rounds"]] == [0, 1, 2]
    for it in s["rounds"]:
        assert it["gap_ci"][0] <= it["gap"] <= it["gap_ci"][1]
        assert it["param_error"] >= 0 and 0 <= it["success_rate"] <= 1
    on_disk = json.loads((uninterrupted.out / "summary.json").read_text())
    assert on_disk["rounds"] == s["rounds"]
    assert uninterrupted.paths["plot"].exists()
    assert set(s["truth"]) == {"block_friction", "block_mass"}


def test_param_error_is_the_largest_relative_error(uninterrupted):
    s = uninterrupted.summary
    for it in s["rounds"]:
        errs = [abs(it["estimate"][n] - s["truth"][n]) / s["truth"][n] for n in s["truth"]]
        assert it["param_error"] == pytest.approx(max(errs))


def test_param_error_is_reported_apart_for_identifiable_and_flagged_parameters(uninterrupted):
    s = uninterrupted.summary
    first, *later = s["rounds"]
    assert first["param_error_identifiable"] is None and first["param_error_flagged"] is None  # nothing fitted yet
    for it in later:
        errs = {n: abs(it["estimate"][n] - s["truth"][n]) / s["truth"][n] for n in s["truth"]}
        for key, want in (("param_error_identifiable", True), ("param_error_flagged", False)):
            chosen = [e for n, e in errs.items() if it["identifiable"][n] is want]
            assert it[key] == (pytest.approx(max(chosen)) if chosen else None)


def test_relative_errors_split_by_identifiability():
    from twinloop.calib.report import relative_errors

    e = relative_errors([1.1, 2.0, 4.0], [1.0, 2.0, 2.0], identifiable=[True, True, False])
    assert e == {"all": pytest.approx(1.0), "identifiable": pytest.approx(0.1), "flagged": pytest.approx(1.0)}
    assert relative_errors([1.1], [1.0])["identifiable"] is None
    assert relative_errors([1.1], [1.0], identifiable=[True])["flagged"] is None


def test_a_killed_loop_resumes_where_it_stopped_with_the_same_result(uninterrupted, tmp_path):
    run_rsr(replace(TINY, rounds=1), tmp_path)  # the run that got killed after round 1 ...
    (tmp_path / "episodes" / "collect_02" / "meta").mkdir(parents=True)  # ... half-way into round 2
    resumed = run_rsr(TINY, tmp_path, mode="resume")
    assert resumed.resumed_at == 2
    assert _strip(resumed.summary) == _strip(uninterrupted.summary)


def test_a_finished_loop_is_not_rerun(uninterrupted):
    again = RSRLoop(TINY, uninterrupted.out, mode="resume").run()
    assert again.resumed_at == TINY.rounds + 1
    assert _strip(again.summary) == _strip(uninterrupted.summary)


def test_resuming_with_another_config_is_refused(uninterrupted):
    with pytest.raises(TwinloopError, match="different RSR config"):
        RSRLoop(replace(TINY, beta=0.0), uninterrupted.out, mode="resume").run()


def test_bad_config_is_named():
    with pytest.raises(TwinloopError, match="rounds"):
        RSRConfig(rounds=0)
    with pytest.raises(TwinloopError, match="beta"):
        RSRConfig(beta=-1)
    with pytest.raises(TwinloopError, match="gap metric"):
        RSRConfig(gap=GapConfig(metric="tv"))


def test_rounds_and_the_evaluation_never_share_an_episode_seed():
    from types import SimpleNamespace

    for bad in ({"episodes": 1001}, {"eval_episodes": 101}, {"rounds": 1000}):
        with pytest.raises(TwinloopError, match=next(iter(bad))):
            RSRConfig(**bad)
    cfg = RSRConfig(episodes=1000, eval_episodes=100, rounds=999)
    loop = SimpleNamespace(cfg=cfg)
    ranges = [RSRLoop._seeds(loop, 0, cfg.eval_episodes, offset=900),
              *(RSRLoop._seeds(loop, r, cfg.episodes) for r in range(1, cfg.rounds + 1))]
    assert len(set().union(*map(set, ranges))) == sum(map(len, ranges))
    assert max(map(max, ranges)) < RSRLoop._seeds(SimpleNamespace(cfg=RSRConfig(seed=1)), 0, 1)[0]


def test_cli_runs_rsr_and_calibrates_its_episodes(tmp_path):
    from typer.testing import CliRunner

    from twinloop.cli import app

    runner = CliRunner()
    out = tmp_path / "rsr"
    res = runner.invoke(app, ["rsr", "--iterations", "1", "--episodes", "1", "--eval-episodes", "1",
                              "--max-ticks", "8", "--max-evals", "15", "--no-errors-in-variables", "-k", "8", "--particles", "2",
                              "--horizon", "0.3", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads((out / "summary.json").read_text())["rounds"][-1]["round"] == 1
    res = runner.invoke(app, ["calibrate", str(out / "episodes" / "collect_01"), "--params",
                              "block_friction,block_mass", "--max-evals", "60", "--holdout", "0",
                              "--out", str(tmp_path / "cal")])
    assert res.exit_code == 0, res.output
    cal = json.loads((tmp_path / "cal" / "summary.json").read_text())
    assert cal["calibration"]["names"] == ["block_friction", "block_mass"]
    res = runner.invoke(app, ["calibrate", str(tmp_path / "missing")])
    assert res.exit_code == 2 and "no such dataset" in res.output
