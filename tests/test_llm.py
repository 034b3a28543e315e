"""The language-model optimizer against a scripted OpenAI-compatible server on 127.0.0.1.

Every failure of the model leaves the tick to the sampling optimizer alone (the same plan MPPI
gives by itself) and says why; a usable reply's plans are rolled out in the next batch.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from chat_server import ChatServer, Scripted
from typer.testing import CliRunner

from twinloop.cli import app
from twinloop.control import Controller, Refiner, RefinerConfig
from twinloop.data import Dataset, EpisodeRecorder
from twinloop.errors import TwinloopError
from twinloop.plan import Feedback, LLMConfig, PlanSpec, make_optimizer
from twinloop.plan.llm import build_messages
from twinloop.run.compare import RunConfig
from twinloop.run.experiment import run_episode
from twinloop.tasks import make_task
from twinloop.twin import MujocoTwin
from twinloop.worlds import SimWorld

pytest.importorskip("openai")

# a plan for block-push (4 knots of pusher targets): sweep along y behind the block
PLAN = [[-0.25, -0.1], [-0.2, 0.0], [-0.15, 0.05], [-0.1, 0.1]]


def reply(plans) -> Scripted:
    return Scripted(json.dumps({"analysis": "push from the -x face", "plans": plans}))


class RecordingTwin:
    """The MuJoCo twin, keeping every control batch it was asked to roll out."""

    def __init__(self, twin):
        self.inner, self.batches = twin, []
        self.model, self.dt, self.nu, self.nstate = twin.model, twin.dt, twin.nu, twin.nstate
        self.param_space = twin.param_space

    def rollout(self, state, ctrl, params=None):
        self.batches.append(np.array(ctrl))
        return self.inner.rollout(state, ctrl, params)


@pytest.fixture(scope="module")
def task():
    return make_task("block-push")


@pytest.fixture(scope="module")
def mujoco_twin(task):
    return MujocoTwin(task.model, task.param_space(), nthread=2)


@pytest.fixture(scope="module")
def state(task):
    return task.initial_state(np.random.default_rng(3))


def refiner(task, twin, optimizer="mppi", iterations=2, **llm):
    opt = make_optimizer(optimizer, llm=LLMConfig(model="scripted", **llm))
    return Refiner(task, twin, opt, RefinerConfig(num_samples=12, iterations=iterations, seed=0))


def contains_plan(batch: np.ndarray, ref: Refiner, knots) -> bool:
    want = ref.basis.controls(np.asarray(knots, float)[None])[0]
    return any(np.allclose(row, want) for row in batch)


# -- a usable reply ---------------------------------------------------------------------------


def test_model_plans_join_the_next_batch_the_twin_rolls_out(task, mujoco_twin, state):
    twin = RecordingTwin(mujoco_twin)
    with ChatServer([reply([PLAN])]) as srv:
        ref = refiner(task, twin, "llm+mppi", base_url=srv.base_url)
        res = ref.refine(state)
    assert len(twin.batches) == 2 and len(srv.requests) == 1
    assert not contains_plan(twin.batches[0], ref, PLAN)
    assert contains_plan(twin.batches[1], ref, PLAN)
    assert res.optimizer_info["plans"] == 1 and res.optimizer_info["fallback"] == ""


def test_model_plans_join_a_cem_batch_too(task, mujoco_twin, state):
    twin = RecordingTwin(mujoco_twin)
    with ChatServer([reply([PLAN])]) as srv:
        ref = refiner(task, twin, "llm+cem", base_url=srv.base_url)
        ref.refine(state)
    assert contains_plan(twin.batches[1], ref, PLAN)


def test_out_of_bound_values_are_clipped_to_the_bounds_and_counted(task, mujoco_twin, state):
    wild = [[-5.0, 0.0], [-0.2, 9.0], [-0.15, 0.05], [-0.1, 0.1]]
    twin = RecordingTwin(mujoco_twin)
    with ChatServer([reply([wild])]) as srv:
        ref = refiner(task, twin, "llm+mppi", base_url=srv.base_url)
        res = ref.refine(state)
    assert contains_plan(twin.batches[1], ref, np.clip(wild, -0.3, 0.3))
    assert res.optimizer_info["clipped"] == 2 and res.optimizer_info["fallback"] == ""


def test_a_fenced_json_reply_is_accepted(task, mujoco_twin, state):
    twin = RecordingTwin(mujoco_twin)
    text = "```json\n" + json.dumps({"analysis": "", "plans": [PLAN]}) + "\n```"
    with ChatServer([Scripted(text)]) as srv:
        ref = refiner(task, twin, "llm+mppi", base_url=srv.base_url)
        ref.refine(state)
    assert contains_plan(twin.batches[1], ref, PLAN)


def test_a_rate_limited_request_is_retried_after_the_servers_delay(task, mujoco_twin, state):
    twin = RecordingTwin(mujoco_twin)
    with ChatServer([Scripted(status=429, headers={"retry-after-ms": "20"}), reply([PLAN])]) as srv:
        ref = refiner(task, twin, "llm+mppi", base_url=srv.base_url, max_retries=1)
        res = ref.refine(state)
    assert len(srv.requests) == 2
    assert contains_plan(twin.batches[1], ref, PLAN) and res.optimizer_info["fallback"] == ""


# -- every failure: the sampling optimizer's own tick, and the reason ----------------------------

FAILURES = {
    "malformed_json": (Scripted('{"analysis": "x", "plans": [[[0.1, 0.2]'), "malformed_json"),
    "not_json_at_all": (Scripted("I would push from the left."), "malformed_json"),
    "nan_literal": (Scripted('{"analysis": "", "plans": [[[NaN, 0], [0, 0], [0, 0], [0, 0]]]}'), "malformed_json"),
    "no_plans_key": (Scripted('{"analysis": "", "knots": []}'), "out_of_schema"),
    "wrong_knot_count": (reply([PLAN[:3]]), "out_of_schema"),
    "wrong_action_size": (reply([[[0.1, 0.2, 0.3]] * 4]), "out_of_schema"),
    "ragged_plan": (reply([[[0.1, 0.2], [0.1], [0.0, 0.0], [0.0, 0.0]]]), "out_of_schema"),
    "strings_for_numbers": (reply([[["0.1", "0.2"]] * 4]), "out_of_schema"),
    "empty_reply": (Scripted(""), "empty_reply"),
    "slow_past_the_timeout": (Scripted(reply([PLAN]).content, delay=1.0), "timeout"),
    "rate_limited_throughout": (Scripted(status=429, headers={"retry-after-ms": "10"}), "rate_limited"),
    "server_error": (Scripted(status=500, headers={"retry-after-ms": "10"}), "http_error: HTTP 500"),
    "bad_request": (Scripted(status=400), "http_error: HTTP 400"),
}


@pytest.mark.parametrize("case", list(FAILURES))
def test_a_failed_call_leaves_the_tick_to_the_sampling_optimizer_and_says_why(task, mujoco_twin, state, case):
    scripted, reason = FAILURES[case]
    twin = RecordingTwin(mujoco_twin)
    with ChatServer([scripted]) as srv:
        ref = refiner(task, twin, "llm+mppi", base_url=srv.base_url, timeout=0.3, max_retries=1)
        res = ref.refine(state)
    alone = refiner(task, mujoco_twin, "mppi").refine(state)
    np.testing.assert_array_equal(res.plan.knots, alone.plan.knots)
    assert res.optimizer_info["fallback"].startswith(reason), res.optimizer_info["fallback"]
    assert res.optimizer_info["plans"] == 0 and res.optimizer_info["calls"] == 1


def test_retryable_errors_are_retried_before_falling_back(task, mujoco_twin, state):
    with ChatServer([Scripted(status=500, headers={"retry-after-ms": "10"})]) as srv:
        res = refiner(task, mujoco_twin, "llm+mppi", base_url=srv.base_url, max_retries=2).refine(state)
    assert len(srv.requests) == 3
    assert res.optimizer_info["fallback"] == "http_error: HTTP 500 after 2 retries"


def test_after_a_fallback_no_more_calls_are_made_in_that_tick(task, mujoco_twin, state):
    with ChatServer([Scripted("no json")]) as srv:
        ref = refiner(task, mujoco_twin, "llm+mppi", iterations=4, base_url=srv.base_url, max_calls=3)
        res = ref.refine(state)
    assert len(srv.requests) == 1 and res.optimizer_info["calls"] == 1


def test_calls_per_tick_are_capped(task, mujoco_twin, state):
    with ChatServer([reply([PLAN])]) as srv:
        ref = refiner(task, mujoco_twin, "llm+mppi", iterations=4, base_url=srv.base_url, max_calls=2)
        res = ref.refine(state)
    assert len(srv.requests) == 2 and res.optimizer_info["calls"] == 2


def test_the_last_iteration_asks_nothing(task, mujoco_twin, state):
    with ChatServer([reply([PLAN])]) as srv:
        refiner(task, mujoco_twin, "llm+mppi", iterations=1, base_url=srv.base_url).refine(state)
    assert srv.requests == []


# -- cache, accounting, what is sent -----------------------------------------------------------


def test_the_same_prompt_is_answered_from_the_cache(task, mujoco_twin, state):
    with ChatServer([reply([PLAN])]) as srv:
        ref = refiner(task, mujoco_twin, "llm+mppi", base_url=srv.base_url)
        first = ref.refine(state)
        ref.reseed(0)
        again = ref.refine(state)
    assert len(srv.requests) == 1
    assert again.optimizer_info["cached"] == 1 and again.optimizer_info["prompt_tokens"] == 0
    np.testing.assert_array_equal(first.plan.knots, again.plan.knots)


def test_the_prompt_holds_the_task_and_the_rollouts_but_no_environment(task, mujoco_twin, state, monkeypatch):
    monkeypatch.setenv("TWINLOOP_TEST_SECRET", "s3cr3t-value-4242")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-0123456789")
    with ChatServer([reply([PLAN])]) as srv:
        refiner(task, mujoco_twin, "llm+mppi", base_url=srv.base_url).refine(state)
    body = json.dumps(srv.requests[0])
    prompt = json.loads(srv.requests[0]["messages"][1]["content"])
    assert prompt["task"] == task.description() and len(prompt["best_rollouts"]) == 3
    assert set(prompt["best_rollouts"][0]["cost_terms"]) == {r.name for r in task.residuals()}
    leaked = [k for k, v in os.environ.items() if len(v) >= 8 and v in body]
    assert leaked == []
    assert srv.headers[0]["authorization"] == "Bearer sk-test-key-0123456789"  # the key goes to its endpoint only
    assert not {"x-stainless-os", "x-stainless-arch"} & {h.lower() for h in srv.headers[0]}


def test_best_and_failed_rollouts_are_summarized_with_their_failure_flags():
    spec = PlanSpec(10, 0.1, 20, 4, "cubic", np.array([-0.3, -0.3]), np.array([0.3, 0.3]))
    costs = np.array([3.0, np.inf, 1.0, 2.0, 5.0])
    fb = Feedback(description="d", spec=spec, candidates=np.zeros((5, 4, 2)), costs=costs,
                  unstable=np.isinf(costs), times=np.arange(3) * 0.1, states=np.zeros((5, 3, 2)),
                  state_names=("a", "b"), cost_terms=lambda: {"t": costs / 2},
                  failure=lambda q: "toppled" if q[0] > 0.5 else "")
    fb.states[4, 2, 0] = 1.0  # the costliest stable rollout ends toppled
    prompt = json.loads(build_messages(fb, np.zeros((4, 2)), None, LLMConfig(n_best=2, n_failed=2))[1]["content"])
    assert [(b["cost"], b["cost_terms"]["t"]) for b in prompt["best_rollouts"]] == [(1.0, 0.5), (2.0, 1.0)]
    assert [(f["cost"], f["unstable"], f["failure"]) for f in prompt["failed_rollouts"]] == [
        (None, True, ""), (5.0, False, "toppled")]


def test_tokens_and_latency_are_recorded_per_tick_in_the_episode(task, mujoco_twin, tmp_path):
    with ChatServer([Scripted(reply([PLAN]).content, prompt_tokens=321, completion_tokens=45)]) as srv:
        ctl = Controller(refiner(task, mujoco_twin, "llm+mppi", base_url=srv.base_url))
        r = run_episode(SimWorld(task), ctl, seed=5, max_ticks=3)
    ds = Dataset.create(tmp_path / "ds", {"fps": 10})
    ds.write(r.recorder)
    info = ds.read(0).refine["optimizer_info"]
    assert len(info) == 3
    assert [i["prompt_tokens"] for i in info] == [321, 321, 321]
    assert all(i["completion_tokens"] == 45 and i["seconds"] > 0 for i in info)


def test_ticks_without_optimizer_information_record_an_empty_object(task, tmp_path):
    rec = EpisodeRecorder.for_task(task, 0)
    rec.add(0.0, np.zeros(10), np.zeros(2), tick=None)
    rec.finish(False)
    ds = Dataset.create(tmp_path / "ds", {"fps": 10})
    ds.write(rec)
    assert ds.read(0).refine["optimizer_info"] == [{}]
    assert ds.info["features"]["refine.optimizer_info"]["dtype"] == "string"


# -- configuration -------------------------------------------------------------------------------


def test_a_model_name_is_required(monkeypatch):
    monkeypatch.delenv("TWINLOOP_LLM_MODEL", raising=False)
    with pytest.raises(TwinloopError, match="model name"):
        make_optimizer("llm+mppi", llm=LLMConfig(base_url="http://127.0.0.1:9/v1"))


def test_base_url_and_model_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("TWINLOOP_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("TWINLOOP_LLM_MODEL", "local-model")
    opt = make_optimizer("llm")
    assert opt.name == "llm+mppi" and opt.endpoint.model == "local-model"
    assert str(opt.endpoint.client.base_url) == "http://127.0.0.1:9/v1/"


def test_a_run_with_a_language_model_needs_two_iterations():
    with pytest.raises(TwinloopError, match="iterations >= 2"):
        RunConfig(optimizer="llm+mppi", refiner=RefinerConfig(iterations=1))


def test_bad_model_settings_are_rejected():
    with pytest.raises(TwinloopError, match="response_format"):
        LLMConfig(response_format="yaml")
    with pytest.raises(TwinloopError, match="timeout"):
        LLMConfig(timeout=0)
    with pytest.raises(TwinloopError, match="optimizer"):
        make_optimizer("llm+annealing")


def test_run_command_takes_a_language_model_optimizer(tmp_path):
    out = tmp_path / "out"
    with ChatServer([reply([PLAN])]) as srv:
        res = CliRunner().invoke(app, [
            "run", "--task", "block-push", "--optimizer", "llm+mppi", "--set", f"planner.llm.base_url={srv.base_url}",
            "--set", "planner.llm.model=scripted", "--set", "planner.refiner.iterations=2", "-k", "8", "--episodes", "1", "--max-ticks", "2",
            "--world", "nominal", "--no-video", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert len(srv.requests) == 2
    info = Dataset(out / "episodes" / "refined").read(0).refine["optimizer_info"]
    assert [i["calls"] for i in info] == [1, 1]
    assert json.loads((out / "summary.json").read_text())["config"]["planner"]["llm"]["model"] == "scripted"
