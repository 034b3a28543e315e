"""Fuzz and probe campaign: bad (and good) input at every public entry point, writers killed
mid-write; counts the outcome of every probe by class.

Each probe is a snippet that either expects a refusal (bad input) or an answer (good input,
checked by its own asserts). Probes run in a worker subprocess, so a segfault or a hang is
counted (and the worker restarted), never fatal. Classes:

    clear error     refused with a TwinloopError (the CLI: exit 2, one ``error:`` line)
    fine            good input answered, and the answer passed its checks
    silent wrong    bad input accepted, or an answer that failed its checks (a NaN, a wrong
                    shape, a half-read dataset)
    unclear crash   any other exception (the CLI: a traceback), or good input refused
    hang            no answer within the timeout
    segfault        the worker died on a signal

The kill campaign SIGKILLs a dataset writer before each of its commit-step syscalls and at
random instants, then reads the dataset: read back exactly (fine), refused with a message
(clear error), or half-right (silent wrong).

    python benchmarks/fuzz_probes.py [--random-kills 20] [--json out.json]
    python benchmarks/fuzz_probes.py --areas reliability --no-kills     # one area, no kills
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

CLASSES = ("clear error", "fine", "silent wrong", "unclear crash", "hang", "segfault")

# -- the worker ---------------------------------------------------------------------------------

WORKER = r'''
import json, os, sys, traceback
os.environ.setdefault("MUJOCO_GL", "egl")
import numpy as np, mujoco
from twinloop.errors import TwinloopError

SETUP = """
import json, os, tempfile, shutil
from pathlib import Path
import numpy as np, mujoco, pyarrow as pa, pyarrow.parquet as pq
from typer.testing import CliRunner
from twinloop.errors import TwinloopError
from twinloop.tasks import make_task
from twinloop.twin import make_twin
from twinloop.params import Param, ParamSpace
from twinloop.plan import MPPI, CEM, BestOfN, PredictiveSampling, make_optimizer, aggregate
from twinloop.plan.spline import PlanSpec
from twinloop.control import Refiner, RefinerConfig, Controller, ProposerSamples
from twinloop.worlds import SimWorld, make_world
from twinloop.worlds.shifted import ShiftedWorld
from twinloop.data import Dataset, EpisodeRecorder, load_lerobot, check as check_dataset
from twinloop.calib import CalibConfig, calibrate, as_trajectories
from twinloop.calib.windows import Trajectory
from twinloop.calib.posterior import laplace
from twinloop.calib.gap import GapConfig, divergence, gap
from twinloop.run.rsr import RSRConfig, RSRLoop
from twinloop.run.compare import RunConfig
from twinloop.stats import wilson
from twinloop.cli import app
BP, PT = make_task("block-push"), make_task("push-t")
TWIN = make_twin("mujoco", BP.model, BP.param_space(), nthread=1)
S0 = BP.initial_state(np.random.default_rng(0))
U0 = np.zeros((3, 10, BP.nu))
runner = CliRunner()
TMP = Path(tempfile.mkdtemp(prefix="fuzz-"))
_n = [0]

def fresh(name="d"):
    _n[0] += 1
    return TMP / f"{name}{_n[0]}"

def cli(*args):
    # exit 2 with one 'error:' line (or typer's usage error) -> TwinloopError; exit 0 -> result
    r = runner.invoke(app, [str(a) for a in args])
    if r.exit_code == 0:
        return r
    lines = [x for x in r.output.splitlines() if x.strip()]
    if r.exit_code == 2 and "Traceback" not in r.output and (
            (lines and lines[-1].startswith("error:")) or "Usage:" in r.output):
        raise TwinloopError("cli: " + (lines[-1] if lines else ""))
    if r.exc_info and not isinstance(r.exception, SystemExit):
        raise r.exception
    raise AssertionError(f"exit {r.exit_code}: {r.output[-300:]}")

def episode(i, T=6, nan_at=None):
    rng = np.random.default_rng(i)
    rec = EpisodeRecorder.for_task(BP, i)
    for k in range(T):
        s = BP.initial_state(rng)
        rec.add(0.1 * k, rng.normal(size=len(BP.obs_names)), rng.uniform(-0.2, 0.2, 2), twin_state=s)
    rec.finish(bool(i % 2))
    return rec

def dataset(n=2, task="block-push"):
    root = fresh("ds")
    ds = Dataset.create(root, {"fps": 10, "task": task})
    for i in range(n):
        ds.write(episode(i))
    return ds

def finite(*xs):
    for x in xs:
        assert np.all(np.isfinite(np.asarray(x, float))), f"non-finite answer: {x}"
"""
G = {}
exec(SETUP, G)
print("ready", flush=True)
for line in sys.stdin:
    job = json.loads(line)
    ns = dict(G)
    try:
        exec(job["code"], ns)
        out = {"outcome": "done"}
    except TwinloopError as exc:
        out = {"outcome": "twinloop", "msg": str(exc)[:200]}
    except AssertionError as exc:
        out = {"outcome": "assert", "msg": str(exc)[:200]}
    except BaseException as exc:
        out = {"outcome": "exception", "msg": f"{type(exc).__name__}: {str(exc)[:200]}"}
    print(json.dumps(out), flush=True)
'''


class Worker:
    """A subprocess that runs probes one at a time; restarted after a crash or a hang."""

    def __init__(self, timeout: float, tmp: str):
        self.timeout, self.tmp = timeout, tmp  # the worker's files go under tmp (removed by the caller)
        self.proc = None

    def _start(self):
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, bufsize=1,
                                     env={**os.environ, "TMPDIR": self.tmp})
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self.lines), daemon=True).start()
        first = self.lines.get(timeout=120)
        assert first.strip() == "ready", first

    @staticmethod
    def _read(proc, q):
        for line in proc.stdout:
            q.put(line)
        q.put(None)

    def run(self, code: str) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.proc.stdin.write(json.dumps({"code": code}) + "\n")
        self.proc.stdin.flush()
        try:
            line = self.lines.get(timeout=self.timeout)
        except queue.Empty:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            return {"outcome": "hang"}
        if line is None:
            rc = self.proc.wait()
            self.proc = None
            return {"outcome": "segfault" if rc < 0 else "exception", "msg": f"worker exited with {rc}"}
        return json.loads(line)

    def close(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


def classify(expect: str, res: dict) -> str:
    o = res["outcome"]
    if o in ("hang", "segfault"):
        return o
    if expect == "error":
        return {"twinloop": "clear error", "done": "silent wrong", "assert": "silent wrong"}.get(o, "unclear crash")
    return {"done": "fine", "assert": "silent wrong"}.get(o, "unclear crash")  # a refused good input: unclear


# -- the probes -----------------------------------------------------------------------------------

BAD_NUMBERS = ["float('nan')", "float('inf')", "-float('inf')", "'x'", "None", "True", "[1, 2]"]
#: every numeric knob of every config, with a value just outside its range
KNOBS = {
    "RefinerConfig": {"num_samples": 1, "horizon": 0, "n_knots": 0, "iterations": 0, "cvar_alpha": 0, "deadline": 0,
                      "seed": -1},
    "MPPI": {"noise": 0, "temperature": 0, "prior_weight": 1.5},
    "CEM": {"noise": 0, "elite_fraction": 0, "min_noise": -0.1, "prior_weight": -0.1},
    "PredictiveSampling": {"noise": 0},
    "BestOfN": {"noise": -0.1},
    "CalibConfig": {"window": 0, "max_evals": 1, "max_iter": 0, "jac_step": 0, "cma_sigma": 0, "particles": 0,
                    "holdout_fraction": 1, "max_rel_width": 0, "max_corr": 0, "null_tol": 1, "seed": -1,
                    "pos_scale": 0, "angle_scale": 0, "vel_scale": 0, "stride": 0, "delay_steps": -1,
                    "start_clearance": 0, "cma_popsize": 1, "start_quiet": -1},
    "GapConfig": {"n_boot": 0, "level": 1, "max_samples": 3, "n_projections": 0, "ridge": -0.1, "seed": -1},
    "RSRConfig": {"rounds": 0, "episodes": 0, "eval_episodes": 0, "beta": -0.1, "particles": 0,
                  "severity": 4, "seed": -1, "world_seed": -1, "max_ticks": 0},
    "RunConfig": {"episodes": 0, "severity": 4, "seed": -1, "max_ticks": 0},
}
NONE_OK = {"deadline", "stride", "delay_steps", "start_clearance", "max_ticks", "cma_popsize"}


def number_probes():
    """Every numeric knob of every config: every kind of non-number, the value just outside its
    range, and the defaults."""
    out = []
    for cls, fields in KNOBS.items():
        for f, outside in fields.items():
            for v in BAD_NUMBERS:
                if not (v == "None" and f in NONE_OK):
                    out.append((f"{cls}({f}={v})", f"{cls}({f}={v})", "error", "configs"))
            out.append((f"{cls}({f}={outside})", f"{cls}({f}={outside})", "error", "configs"))
        out.append((f"{cls}() defaults", f"{cls}()", "ok", "configs"))
    return out


def rollout_probes():
    p = []
    bad_states = {"nan": "np.full_like(S0, np.nan)", "inf": "np.full_like(S0, np.inf)", "short": "S0[:-1]",
                  "2d": "S0[None]", "empty": "np.zeros(0)", "str": "'abc'", "obj": "np.array([object()] * len(S0))",
                  "complex": "S0 + 1j", "none": "None", "list_of_str": "['a'] * len(S0)"}
    for k, v in bad_states.items():
        p.append((f"rollout state {k}", f"TWIN.rollout({v}, U0)", "error", "rollout"))
    bad_ctrl = {"nan": "np.full((2, 5, 2), np.nan)", "inf": "np.full((2, 5, 2), np.inf)", "nu+1": "np.zeros((2, 5, 3))",
                "K=0": "np.zeros((0, 5, 2))", "T=0": "np.zeros((2, 0, 2))", "4d": "np.zeros((1, 2, 5, 2))",
                "1d": "np.zeros(2)", "str": "'u'", "none": "None"}
    for k, v in bad_ctrl.items():
        p.append((f"rollout ctrl {k}", f"TWIN.rollout(S0, {v})", "error", "rollout"))
    sp = "BP.param_space()"
    bad_params = {"nan": f"np.full((2, len({sp})), np.nan)", "below": f"{sp}.low[None] - 1",
                  "above": f"{sp}.high[None] + 1", "wrong n": "np.ones((2, 1))", "3d": f"np.ones((1, 1, len({sp})))",
                  "empty list": "[]", "str": "'p'", "mixed list": "[BP.model, 1.0]"}
    for k, v in bad_params.items():
        p.append((f"rollout params {k}", f"TWIN.rollout(S0, U0, params={v})", "error", "rollout"))
    scenes = {
        "more geoms": "s = BP.spec(); [s.worldbody.add_geom(type=mujoco.mjtGeom.mjGEOM_BOX, size=[.01] * 3, pos=[1 + .03 * i, 1, .01]) for i in range(300)]; m = s.compile()",
        "other task": "m = PT.model",
        "empty scene": "m = mujoco.MjModel.from_xml_string('<mujoco/>')",
        "other timestep": "m = mujoco.MjModel.from_xml_path(str(BP.xml_path)); m.opt.timestep = 0.003",
        "one more site": "s = BP.spec(); s.worldbody.add_site(pos=[0, 0, 1]); m = s.compile()",
        "more sensors": "s = BP.spec(); s.add_sensor(type=mujoco.mjtSensor.mjSENS_CLOCK); m = s.compile()",
    }
    for k, setup in scenes.items():
        p.append((f"rollout model list: {k}", f"{setup}\nTWIN.rollout(S0, U0, params=[BP.model, m])", "error", "rollout"))
    for k, v in {"max_speed nan": "max_speed=float('nan')", "max_speed -1": "max_speed=-1",
                 "nthread 0": "nthread=0", "nthread nan": "nthread=float('nan')", "nthread str": "nthread='2'",
                 "param_space str": "param_space='x'", "model str": ""}.items():
        code = "make_twin('mujoco', 'model')" if k == "model str" else f"make_twin('mujoco', BP.model, {v})"
        p.append((f"make_twin {k}", code, "error", "rollout"))
    p.append(("make_twin with a space the model lacks", "make_twin('mujoco', PT.model, BP.param_space())", "error", "rollout"))
    p.append(("make_twin unknown backend", "make_twin('bullet', BP.model)", "error", "rollout"))
    good = {
        "nominal": "r = TWIN.rollout(S0, U0); assert r.qpos.shape == (1, 3, 11, BP.model.nq) and r.ok.all()",
        "2d ctrl": "r = TWIN.rollout(S0, np.zeros((10, 2))); assert r.qpos.shape[:3] == (1, 1, 11)",
        "params": "r = TWIN.rollout(S0, U0, params=BP.param_space().sample_prior(np.random.default_rng(0), 4)); assert r.qpos.shape[0] == 4",
        "model list": "r = TWIN.rollout(S0, U0, params=[BP.model, BP.param_space().apply(BP.model, BP.param_space().nominal)]); assert r.ok.all()",
        "huge ctrl": "r = TWIN.rollout(S0, np.full((2, 20, 2), 1e6)); assert r.qpos.shape[1] == 2",
        "huge state": "s = S0.copy(); s[BP.model.nq:] = 1e9; r = TWIN.rollout(s, U0); assert not r.ok.any()",
        "rollout_many": "r = TWIN.rollout_many(np.stack([S0, S0]), np.zeros((2, 5, 2))); assert r.qpos.shape[:2] == (1, 2)",
        "same twin, many lists": "[TWIN.rollout(S0, U0, params=[BP.model] * k) for k in (1, 2, 3, 2, 1)]",
        "ok rows finite": "r = TWIN.rollout(S0, np.random.default_rng(1).uniform(-1e3, 1e3, (8, 30, 2))); finite(r.qpos[r.ok])",
    }
    for k, code in good.items():
        p.append((f"rollout good: {k}", code, "ok", "rollout"))
    return p


def params_probes():
    p = []
    base = "'f', 'geom:block/friction[0]'"
    for k, args in {"low nan": "float('nan'), 1, .5", "high inf": "0, float('inf'), .5", "low>high": "1, 0, .5",
                    "nominal out": "0, 1, 2", "nominal nan": "0, 1, float('nan')", "std nan": "0, 1, .5, float('nan')",
                    "std 0": "0, 1, .5, 0", "std -1": "0, 1, .5, -1", "low str": "'0', 1, .5", "bool": "False, True, .5"}.items():
        p.append((f"Param {k}", f"Param({base}, {args})", "error", "params"))
    for k, t in {"bad address": "'geom block friction'", "unknown kind": "'site:x/pos[0]'", "empty": "()",
                 "int target": "(3,)"}.items():
        p.append((f"Param target {k}", f"Param('f', {t}, 0, 1, .5)", "error", "params"))
    p.append(("Param empty name", "Param('', 'geom:block/friction[0]', 0, 1, .5)", "error", "params"))
    p.append(("ParamSpace duplicate", "ParamSpace((Param('a', 'geom:block/friction[0]', 0, 1, .5),) * 2)", "error", "params"))
    p.append(("ParamSpace non-param", "ParamSpace(('a',))", "error", "params"))
    sp = "BP.param_space()"
    for k, code in {"apply nan": f"{sp}.apply(BP.model, np.full(len({sp}), np.nan))",
                    "apply out of bounds": f"{sp}.apply(BP.model, {sp}.high + 1)",
                    "apply batch": f"{sp}.apply(BP.model, np.ones((2, len({sp}))))",
                    "apply on other model": f"{sp}.apply(PT.model, {sp}.nominal)",
                    "missing geom": "ParamSpace((Param('a', 'geom:nope/friction[0]', 0, 1, .5),)).apply(BP.model, [.5])",
                    "missing field": "ParamSpace((Param('a', 'geom:block/nope', 0, 1, .5),)).apply(BP.model, [.5])",
                    "index out of range": "ParamSpace((Param('a', 'geom:block/friction[7]', 0, 1, .5),)).apply(BP.model, [.5])",
                    "no index on a vector": "ParamSpace((Param('a', 'geom:block/friction', 0, 1, .5),)).apply(BP.model, [.5])",
                    "sample n=0": f"{sp}.sample_prior(np.random.default_rng(0), 0)",
                    "sample n nan": f"{sp}.sample_prior(np.random.default_rng(0), float('nan'))",
                    "sample rng int": f"{sp}.sample_prior(0, 3)",
                    "subset unknown": f"{sp}.subset(['nope'])"}.items():
        p.append((f"params {k}", code, "error", "params"))
    for k, code in {"read back": f"x = {sp}.nominal * 1.1; np.testing.assert_allclose({sp}.read({sp}.apply(BP.model, np.minimum(x, {sp}.high))), np.minimum(x, {sp}.high))",
                    "mass refreshes constants": f"m = {sp}.apply(BP.model, {sp}.high); assert m.body_subtreemass[0] != BP.model.body_subtreemass[0]",
                    "prior within bounds": f"x = {sp}.sample_prior(np.random.default_rng(3), 50); assert (x >= {sp}.low).all() and (x <= {sp}.high).all(); finite(x)"}.items():
        p.append((f"params good: {k}", code, "ok", "params"))
    return p


def control_probes():
    p = []
    ref = "Refiner(BP, TWIN, make_optimizer('mppi'), RefinerConfig(num_samples=8, horizon=0.3))"
    for k, code in {
        "twin of another task": "Refiner(BP, make_twin('mujoco', PT.model), make_optimizer('mppi'))",
        "timestep 0.003": "m = mujoco.MjModel.from_xml_path(str(BP.xml_path)); m.opt.timestep = 0.003; Refiner(BP, make_twin('mujoco', m), make_optimizer('mppi'))",
        "timestep 0.3": "m = mujoco.MjModel.from_xml_path(str(BP.xml_path)); m.opt.timestep = 0.3; Refiner(BP, make_twin('mujoco', m), make_optimizer('mppi'))",
        "optimizer str": "Refiner(BP, TWIN, 'mppi')",
        "config dict": "Refiner(BP, TWIN, make_optimizer('mppi'), {'num_samples': 8})",
        "huge horizon": "Refiner(BP, TWIN, make_optimizer('mppi'), RefinerConfig(horizon=1e6))",
        "params nan": "Refiner(BP, TWIN, make_optimizer('mppi'), params=np.full((2, 3), np.nan))",
        "extra cost str": "Refiner(BP, TWIN, make_optimizer('mppi'), extra_costs=['x'])",
        "refine nan state": f"{ref}.refine(np.full_like(S0, np.nan))",
        "refine short state": f"{ref}.refine(S0[:-1])",
        "refine prior array": f"{ref}.refine(S0, prior=np.zeros((4, 2)))",
        "refine proposals nan": f"r = {ref}; r.refine(S0, proposals=np.full((3, r.spec.n_knots, 2), np.nan))",
        "plan from nan actions": f"{ref}.plan_from_actions(np.full((5, 2), np.nan))",
        "plan from wrong nu": f"{ref}.plan_from_actions(np.zeros((5, 3)))",
        "controller proposer str": f"Controller({ref}, proposer='scripted')",
        "controller samples -1": "ProposerSamples(BP.default_proposer(), -1)",
        "controller no refine no proposer": f"Controller({ref}, refine=False)",
        "aggregate bad risk": "aggregate(np.zeros((2, 3)), np.ones((2, 3), bool), 'median')",
        "aggregate alpha nan": "aggregate(np.zeros((2, 3)), np.ones((2, 3), bool), 'cvar', float('nan'))",
        "PlanSpec nan period": "PlanSpec(5, float('nan'), 2, 3, 'cubic', np.zeros(2) - 1, np.ones(2))",
        "PlanSpec bounds nan": "PlanSpec(5, .1, 2, 3, 'cubic', np.full(2, np.nan), np.ones(2))",
        "MPPI noise_scales empty": "MPPI(noise_scales=())",
        "make_optimizer unknown": "make_optimizer('ppo')",
        "make_optimizer bad kw": "make_optimizer('mppi', colour=1)",
    }.items():
        p.append((f"control {k}", code, "error", "control"))
    for opt in ("mppi", "cem", "predictive", "best_of_n"):
        p.append((f"control good: refine with {opt}",
                  f"r = Refiner(BP, TWIN, make_optimizer('{opt}'), RefinerConfig(num_samples=8, horizon=0.3, iterations=2)).refine(S0)\n"
                  "a = r.plan.actions(); finite(a, r.cost); assert (a >= BP.action_low).all() and (a <= BP.action_high).all()",
                  "ok", "control"))
    p.append(("control good: risk worst under particles",
              "r = Refiner(BP, TWIN, make_optimizer('mppi'), RefinerConfig(num_samples=8, horizon=0.3, risk='worst'), "
              "params=BP.param_space().sample_prior(np.random.default_rng(0), 3)).refine(S0); finite(r.cost)", "ok", "control"))
    return p


def task_world_probes():
    p = []
    for k, code in {
        "unknown task": "make_task('push-q')", "task bad option": "make_task('push-t', colour='red')",
        "block-push goal nan": "make_task('block-push', goal=(np.nan, 0, 0))",
        "block-push goal short": "make_task('block-push', goal=(0.1, 0))",
        "push-t goal inf": "make_task('push-t', goal=(np.inf, 0, 0))",
        "push-t coverage 0": "make_task('push-t', success_coverage=0)",
        "push-t coverage nan": "make_task('push-t', success_coverage=float('nan'))",
        "push-t weight nan": "make_task('push-t', weights={'reach': float('nan')})",
        "push-t unknown weight": "make_task('push-t', weights={'speed': 1})",
        "step before reset": "SimWorld(BP).step(np.zeros(2))",
        "reset seed -1": "SimWorld(BP).reset(-1)",
        "reset seed nan": "SimWorld(BP).reset(float('nan'))",
        "reset seed str": "SimWorld(BP).reset('a')",
        "step nan action": "w = SimWorld(BP); w.reset(0); w.step(np.full(2, np.nan))",
        "step out of bounds": "w = SimWorld(BP); w.reset(0); w.step(np.full(2, 5.0))",
        "step wrong shape": "w = SimWorld(BP); w.reset(0); w.step(np.zeros(3))",
        "shifted severity 9": "ShiftedWorld(BP, severity=9)",
        "shifted severity nan": "ShiftedWorld(BP, severity=float('nan'))",
        "shifted step before reset": "ShiftedWorld(BP, severity=1).step(np.zeros(2))",
        "world unknown": "make_world(BP, 'mars')",
        "world timestep 0.003": "m = mujoco.MjModel.from_xml_path(str(BP.xml_path)); m.opt.timestep = 0.003; SimWorld(BP, m)",
        "state_from_obs nan": "BP.state_from_obs(np.full(len(BP.obs_names), np.nan))",
        "state_from_obs short": "BP.state_from_obs(np.zeros(3))",
        "wilson k>n": "wilson(5, 3)", "wilson nan": "wilson(float('nan'), 3)",
        "shifted world seed -1": "ShiftedWorld(BP, 2, seed=-1)",
        "episode max_ticks nan": "from twinloop.run.experiment import run_episode; c = Controller(Refiner(BP, TWIN, make_optimizer('mppi'), RefinerConfig(num_samples=4, horizon=.2)), BP.default_proposer()); run_episode(SimWorld(BP), c, 0, max_ticks=float('nan'))",
        "episode max_ticks 0": "from twinloop.run.experiment import run_episode; c = Controller(Refiner(BP, TWIN, make_optimizer('mppi'), RefinerConfig(num_samples=4, horizon=.2))); run_episode(SimWorld(BP), c, 0, max_ticks=0)",
        "episodes without seeds": "from twinloop.run.experiment import run_episodes; c = Controller(Refiner(BP, TWIN, make_optimizer('mppi'), RefinerConfig(num_samples=4, horizon=.2))); run_episodes(SimWorld(BP), c, [])",
        "controller act on a nan observation": "c = Controller(Refiner(BP, TWIN, make_optimizer('mppi'), RefinerConfig(num_samples=4, horizon=.2))); c.act(np.full(len(BP.obs_names), np.nan))",
        "infogap beta nan": "from twinloop.calib.infogap import infogap_cost; infogap_cost(float('nan'))",
        "infogap noise 0": "from twinloop.calib.infogap import information_gain; information_gain(TWIN.rollout(S0, U0), 0.0)",
        "bootstrap n_boot 0": "from twinloop.stats import bootstrap_ci; bootstrap_ci([1., 2.], n_boot=0)",
    }.items():
        p.append((f"task/world {k}", code, "error", "tasks & worlds"))
    for k, code in {
        "episode": "w = SimWorld(BP); o = w.reset(3); o2, info = w.step(np.clip(o[:2], BP.action_low, BP.action_high)); finite(o2)",
        "same seed same episode": "a = ShiftedWorld(BP, 2, seed=1); b = ShiftedWorld(BP, 2, seed=1); np.testing.assert_array_equal(a.reset(5), b.reset(5))",
        "push-t success test": "assert isinstance(PT.success(PT.initial_state(np.random.default_rng(0))[:PT.model.nq]), (bool, np.bool_))",
    }.items():
        p.append((f"task/world good: {k}", code, "ok", "tasks & worlds"))
    return p


def data_probes():
    p = []
    for k, code in {
        "timestamps backwards": "r = EpisodeRecorder(0); r.add(.2, [0.], [0.]); r.add(.1, [0.], [0.])",
        "timestamp equal": "r = EpisodeRecorder(0); r.add(.2, [0.], [0.]); r.add(.2, [0.], [0.])",
        "timestamp nan": "EpisodeRecorder(0).add(float('nan'), [0.], [0.])",
        "timestamp str": "EpisodeRecorder(0).add('t', [0.], [0.])",
        "obs length change": "r = EpisodeRecorder(0); r.add(0, [0., 1.], [0.]); r.add(.1, [0.], [0.])",
        "cost str": "EpisodeRecorder(0).add(0, [0.], [0.], cost='high')",
        "tick iterations nan": "from twinloop.control import TickInfo; EpisodeRecorder(0).add(0, [0.], [0.], tick=TickInfo(action=np.zeros(1), iterations=float('nan')))",
        "episode index -1": "EpisodeRecorder(-1)",
        "finish empty": "EpisodeRecorder(0).finish(True)",
        "finish non-bool": "r = EpisodeRecorder(0); r.add(0, [0.], [0.]); r.finish('yes')",
        "create fps nan": "Dataset.create(fresh(), {'fps': float('nan')})",
        "create fps 0": "Dataset.create(fresh(), {'fps': 0})",
        "create in a non-empty folder": "d = fresh(); d.mkdir(); (d / 'x').write_text('x'); Dataset.create(d, {'fps': 10})",
        "create where a dataset is": "ds = dataset(1); Dataset.create(ds.root, {'fps': 10, 'task': 'block-push'})",
        "resume another task": "ds = dataset(1); Dataset.create(ds.root, {'fps': 10, 'task': 'push-t'}, mode='resume')",
        "create unstorable info": "Dataset.create(fresh(), {'fps': 10, 'thing': object()})",
        "write twice": "ds = dataset(1); ds.write(episode(0))",
        "write other columns": "ds = dataset(1); r = EpisodeRecorder(1); r.add(0, [0.], [0.]); r.finish(True); ds.write(r)",
        "write a str": "dataset(0).write('episode')",
        "read missing index": "dataset(1).read(5)",
        "read index str": "dataset(1).read('0')",
        "open a non-dataset": "Dataset(fresh())",
        "swapped files": "ds = dataset(2); a, b = ds.path(0), ds.path(1); t = a.read_bytes(); a.write_bytes(b.read_bytes()); b.write_bytes(t); ds.read(0)",
        "dropped rows": "ds = dataset(1); t = pq.read_table(ds.path(0)); pq.write_table(t.slice(0, 3), ds.path(0)); ds.read(0)",
        "flipped byte": "ds = dataset(1); d = bytearray(ds.path(0).read_bytes()); d[len(d) // 3] ^= 1; ds.path(0).write_bytes(bytes(d)); ds.read(0)",
        "truncated file": "ds = dataset(1); ds.path(0).write_bytes(ds.path(0).read_bytes()[:100]); ds.read(0)",
        "missing file": "ds = dataset(1); ds.path(0).unlink(); ds.read(0)",
        "missing episodes.jsonl": "ds = dataset(2); (ds.root / 'meta/episodes.jsonl').unlink(); Dataset(ds.root)",
        "missing info.json": "ds = dataset(2); (ds.root / 'meta/info.json').unlink(); Dataset(ds.root)",
        "malformed info.json": "ds = dataset(1); p = ds.root / 'meta/info.json'; p.write_text(p.read_text()[:-5]); Dataset(ds.root)",
        "info.json a list": "ds = dataset(1); (ds.root / 'meta/info.json').write_text('[1]'); Dataset(ds.root)",
        "info fps string": "ds = dataset(1); p = ds.root / 'meta/info.json'; i = json.loads(p.read_text()); i['fps'] = 'ten'; p.write_text(json.dumps(i)); Dataset(ds.root)",
        "stale totals": "ds = dataset(2); p = ds.root / 'meta/info.json'; i = json.loads(p.read_text()); i['total_frames'] = 1; p.write_text(json.dumps(i)); Dataset(ds.root)",
        "edited episodes.jsonl": "ds = dataset(2); p = ds.root / 'meta/episodes.jsonl'; p.write_text(p.read_text().replace('true', 'false')); Dataset(ds.root)",
        "garbage episodes.jsonl": "ds = dataset(2); (ds.root / 'meta/episodes.jsonl').write_text('{oops'); Dataset(ds.root)",
        "meta link to nowhere": "ds = dataset(1); shutil.rmtree(ds.root / os.readlink(ds.root / 'meta')); Dataset(ds.root)",
        "split fraction 1": "dataset(2).split(1.0)", "split fraction nan": "dataset(2).split(float('nan'))",
        "lerobot fps nan": "ds = dataset(1); load_lerobot(ds.root, {'timestamp': None}, fps=float('nan'))",
        "lerobot fps -1": "ds = dataset(1); load_lerobot(ds.root, {'timestamp': None}, fps=-1)",
        "lerobot no fps no timestamps": "ds = dataset(1); load_lerobot(ds.root, {'timestamp': None})",
        "lerobot unknown field": "load_lerobot(dataset(1).root, {'state': 'x'})",
        "lerobot missing column": "load_lerobot(dataset(1).root, {'qpos': 'observation.qpos'})",
        "lerobot column map list": "load_lerobot(dataset(1).root, ['obs'])",
        "lerobot no files": "d = fresh(); d.mkdir(); load_lerobot(d)",
        "lerobot not parquet": "d = fresh(); d.mkdir(); (d / 'a.parquet').write_text('x'); load_lerobot(d / 'a.parquet')",
        "lerobot nan episode index": "f = fresh('f').with_suffix('.parquet'); pq.write_table(pa.table({'observation.state': [[0.], [1.]], 'action': [[0.], [0.]], 'timestamp': [0., .1], 'episode_index': [0., float('nan')]}), f); load_lerobot(f)",
        "lerobot null rows": "f = fresh('f').with_suffix('.parquet'); pq.write_table(pa.table({'observation.state': [[0.], None], 'action': [[0.], [0.]], 'timestamp': [0., .1]}), f); load_lerobot(f)",
        "lerobot ragged vectors": "f = fresh('f').with_suffix('.parquet'); pq.write_table(pa.table({'observation.state': [[0.], [1., 2.]], 'action': [[0.], [0.]], 'timestamp': [0., .1]}), f); load_lerobot(f)",
        "lerobot string column": "f = fresh('f').with_suffix('.parquet'); pq.write_table(pa.table({'observation.state': ['a', 'b'], 'action': [[0.], [0.]], 'timestamp': [0., .1]}), f); load_lerobot(f)",
        "create chunks_size 0": "Dataset.create(fresh(), {'fps': 10, 'chunks_size': 0})",
        "recorder for a non-task": "EpisodeRecorder.for_task('block-push', 0)",
    }.items():
        p.append((f"data {k}", code, "error", "datasets"))
    for k, code in {
        "round trip": "ds = dataset(3); e = Dataset(ds.root).read(2); r = episode(2).to_table(); np.testing.assert_array_equal(e.obs, np.stack(r.column('observation.state').to_pylist()))",
        "nan obs kept": "ds = Dataset.create(fresh(), {'fps': 10}); r = EpisodeRecorder(0); r.add(0, [np.nan, 1.], [0.]); r.finish(True); ds.write(r); assert np.isnan(ds.read(0).obs[0, 0])",
        "check ok": "assert check_dataset(dataset(2).root).ok",
        "global index": "ds = dataset(3); idx = sum((pq.read_table(ds.path(i)).column('index').to_pylist() for i in range(3)), []); assert idx == list(range(len(idx)))",
        "resume continues": "ds = dataset(2); d2 = Dataset.create(ds.root, {'fps': 10, 'task': 'block-push'}, mode='resume'); d2.write(episode(2)); assert Dataset(ds.root).indices == [0, 1, 2]",
        "lerobot reads ours": "assert len(load_lerobot(dataset(2).root)) == 2",
    }.items():
        p.append((f"data good: {k}", code, "ok", "datasets"))
    return p


def calib_probes():
    p = []
    sp = "BP.param_space().subset(['block_friction', 'block_mass'])"
    traj = ("rng = np.random.default_rng(0); S = np.cumsum(rng.normal(size=(12, BP.nstate)) * 1e-3, 0); "
            "A = rng.uniform(-.1, .1, (11, 2))")
    for k, code in {
        "gap at nan params": f"{traj}; gap(BP, [Trajectory(S, A)], [np.nan] * 3)",
        "gap with a twin of another scene": f"{traj}; gap(BP, [Trajectory(S, A)], twin=make_twin('mujoco', PT.model))",
        "nan in a state": f"{traj}; S[4, 7] = np.nan; calibrate(BP, [Trajectory(S, A)], {sp}, config=CalibConfig(max_evals=10))",
        "inf in an action": f"{traj}; A[2, 0] = np.inf; as_trajectories(BP, [Trajectory(S, A)])",
        "nan timestamp": f"{traj}; e = type('E', (), dict(states=S, actions=A, timestamps=np.r_[np.arange(11) * .1, np.nan]))(); as_trajectories(BP, [e])",
        "wrong state width": f"{traj}; as_trajectories(BP, [Trajectory(S[:, :5], A)])",
        "no episodes": f"calibrate(BP, [], {sp})",
        "empty space": "calibrate(BP, [1], ParamSpace(()))",
        "x0 out of bounds": f"{traj}; calibrate(BP, [Trajectory(S, A)], {sp}, x0=[9, 9])",
        "x0 nan": f"{traj}; calibrate(BP, [Trajectory(S, A)], {sp}, x0=[np.nan, 1])",
        "method unknown": "CalibConfig(method='adam')",
        "budget too small": f"{traj}; calibrate(BP, [Trajectory(S, A)], {sp}, config=CalibConfig(max_evals=3))",
        "twin of another space": f"{traj}; calibrate(BP, [Trajectory(S, A)], {sp}, twin=TWIN)",
        "constant data": "S = np.zeros((12, BP.nstate)); A = np.zeros((11, 2)); as_trajectories(BP, [Trajectory(S, A)]); from twinloop.calib.windows import StateError; StateError.for_task(BP, [Trajectory(S, A)])",
        "divergence nan": "divergence(np.full((10, 2), np.nan), np.zeros((10, 2)))",
        "divergence 3 rows": "divergence(np.zeros((3, 2)), np.zeros((3, 2)))",
        "divergence shapes": "divergence(np.zeros((10, 2)), np.zeros((10, 3)))",
        "gap metric unknown": "GapConfig(metric='tv')",
        "rsr corrupt state": "d = fresh(); d.mkdir(); (d / '.twinloop-output').write_text(''); (d / 'rsr_state.json').write_text('{'); RSRLoop(RSRConfig(), d, mode='resume')",
        "rsr state of another shape": "d = fresh(); d.mkdir(); (d / '.twinloop-output').write_text(''); (d / 'rsr_state.json').write_text('{\"config\": 1}'); RSRLoop(RSRConfig(), d, mode='resume')",
        "rsr into a non-empty folder": "d = fresh(); d.mkdir(); (d / 'x').write_text('x'); RSRLoop(RSRConfig(), d)",
        "rsr bad mode": "RSRLoop(RSRConfig(), fresh(), mode='append')",
    }.items():
        p.append((f"calib {k}", code, "error", "calibration"))
    lap = ("space = " + sp + "; G = np.random.default_rng(0).normal(size=(4, 2)); "
           "cov, ds, corr, null, *_ = laplace(H, G, .01, 1., np.array([.02, .05]), space, CalibConfig().null_tol, None); "
           "c = corr[np.isfinite(corr)]; assert np.all(np.abs(c) <= 1); assert np.all(np.sqrt(np.diag(cov)) <= space.prior_std + 1e-12); "
           "assert np.all((ds > 0) | np.isinf(ds))")
    for k, H in {"negative definite": "[[-1, .2], [.2, -3]]", "indefinite": "[[2, 0], [0, -1]]", "zero": "[[0, 0], [0, 0]]",
                 "near singular": "[[1, 1], [1, 1 + 1e-12]]", "tiny": "[[1e-300, 0], [0, 1e-300]]",
                 "huge": "[[1e300, 0], [0, 1e300]]", "positive": "[[2, .5], [.5, 1]]"}.items():
        p.append((f"calib good: posterior from a {k} curvature", f"H = np.array({H}, float); {lap}", "ok", "calibration"))
    p.append(("calib good: a short fit reports a finite estimate", f"{traj.replace('1e-3', '0')}\n"
              "from twinloop.calib import record_trajectory\n"
              "w = SimWorld(BP, BP.param_space().subset(['block_friction', 'block_mass']).apply(BP.model, [.4, .7]))\n"
              "trs = [record_trajectory(w, BP.excitation(s), s, 30) for s in range(2)]\n"
              f"post = calibrate(BP, trs, {sp}, 'cma', config=CalibConfig(max_evals=40, errors_in_variables=False))\n"
              "finite(post.estimate, post.covariance); c = post.correlation[np.isfinite(post.correlation)]; assert np.all(np.abs(c) <= 1)\n"
              "assert 'e+1' not in json.dumps(post.to_dict())", "ok", "calibration"))
    return p


def cli_probes():
    p = []
    run = ["run", "--task", "block-push", "--episodes", "1", "--max-ticks", "3", "-k", "4", "--no-video"]
    bad = {
        "--seed -1": ["--seed", "-1"], "--horizon inf": ["--horizon", "inf"], "--horizon nan": ["--horizon", "nan"],
        "-k 0": ["-k", "0"], "--episodes 0": ["--episodes", "0"], "--severity 5": ["--severity", "5"],
        "--set iterations=0": ["--set", "planner.refiner.iterations=0"], "--task nope": ["--task", "nope"], "--world mars": ["--world", "mars"],
        "--set risk=median": ["--set", "planner.refiner.risk=median"], "--set unknown": ["--set", "planner.speed=3"], "--max-ticks -2": ["--max-ticks", "-2"], "-k x": ["-k", "x"],
        "unknown option": ["--speed", "3"],
    }
    for k, extra in bad.items():
        p.append((f"cli run {k}", f"cli(*{run!r}, *{extra!r}, '--out', fresh())", "error", "CLI"))
    for k, code in {
        "run --out /proc/x": f"cli(*{run!r}, '--out', '/proc/x')",
        "run into an earlier output": f"d = fresh(); cli(*{run!r}, '--out', d); cli(*{run!r}, '--out', d)",
        "run --overwrite a foreign folder": f"d = fresh(); d.mkdir(); (d / 'thesis.tex').write_text('x'); cli(*{run!r}, '--out', d, '--overwrite')",
        "calibrate task mismatch": "ds = dataset(2, task='push-t'); cli('calibrate', ds.root, '--task', 'block-push', '--out', fresh())",
        "calibrate missing dataset": "cli('calibrate', fresh(), '--out', fresh())",
        "calibrate malformed info.json": "ds = dataset(2); p = ds.root / 'meta/info.json'; p.write_text('{'); cli('calibrate', ds.root, '--out', fresh())",
        "calibrate --out /proc/x": "ds = dataset(2); cli('calibrate', ds.root, '--out', '/proc/x')",
        "calibrate --max-evals 0": "ds = dataset(2); cli('calibrate', ds.root, '--max-evals', '0', '--out', fresh())",
        "calibrate --holdout 1": "ds = dataset(2); cli('calibrate', ds.root, '--holdout', '1', '--out', fresh())",
        "calibrate --params nope": "ds = dataset(2); cli('calibrate', ds.root, '--params', 'nope', '--out', fresh())",
        "calibrate --lerobot without --task": "ds = dataset(2); cli('calibrate', ds.root, '--lerobot', '--out', fresh())",
        "calibrate --lerobot --fps nan": "ds = dataset(2); cli('calibrate', ds.root, '--lerobot', '--task', 'block-push', '--column-map', 'timestamp=', '--fps', 'nan', '--out', fresh())",
        "calibrate bad column map": "ds = dataset(2); cli('calibrate', ds.root, '--column-map', 'obs', '--task', 'block-push', '--out', fresh())",
        "rsr corrupt state": "d = fresh(); d.mkdir(); (d / '.twinloop-output').write_text(''); (d / 'rsr_state.json').write_text('{'); cli('rsr', '--out', d, '--resume')",
        "rsr --resume --overwrite": "cli('rsr', '--out', fresh(), '--resume', '--overwrite')",
        "rsr --beta nan": "cli('rsr', '--beta', 'nan', '--out', fresh())",
        "rsr --method adam": "cli('rsr', '--method', 'adam', '--out', fresh())",
        "rsr into a non-empty folder": "d = fresh(); d.mkdir(); (d / 'x').write_text('x'); cli('rsr', '--out', d)",
        "dataset check missing": "cli('dataset', 'check', fresh())",
        "distill --rounds 0": "cli('distill', '--rounds', '0', '--out', fresh())",
        "distill -k nan": "cli('distill', '-k', 'nan', '--out', fresh())",
        "demo --episodes -3": "cli('demo', '--episodes', '-3', '--out', fresh())",
        "unknown command": "cli('fly')",
    }.items():
        p.append((f"cli {k}", code, "error", "CLI"))
    for k, code in {
        "run": f"d = fresh(); cli(*{run!r}, '--out', d); assert json.loads((d / 'summary.json').read_text())['episodes'] == 1",
        "run --overwrite": f"d = fresh(); cli(*{run!r}, '--out', d); cli(*{run!r}, '--out', d, '--overwrite'); assert len(Dataset(d / 'episodes/refined')) == 1",
        "dataset check": "r = cli('dataset', 'check', dataset(2).root); assert 'all verified' in r.output",
        "dataset check lists a damaged file, exit 1": "ds = dataset(2); ds.path(1).write_bytes(b'x'); r = runner.invoke(app, ['dataset', 'check', str(ds.root)]); assert r.exit_code == 1 and 'problem:' in r.output and 'episode_000001' in r.output",
        "tasks": "assert 'push-t' in cli('tasks').output",
    }.items():
        p.append((f"cli good: {k}", code, "ok", "CLI"))
    return p


def reliability_probes():
    """The last unclear crashes and silent answers, and what episodes now carry: each task's
    success test, worlds checked like twins, episodes of another task or scene refused by every
    consumer, remote addresses, run and posterior folders, a user's own task, LeRobot exports."""
    p = []
    pt_eps = ("from twinloop.data import recorded_on; d = Dataset.create(fresh(), {'fps': 10, **recorded_on(PT)}); "
              "r = EpisodeRecorder.for_task(PT, 0); s = PT.initial_state(np.random.default_rng(0))\n"
              "for k in range(8): r.add(.1 * k, np.zeros(len(PT.obs_names)), PT.hold_action(s), twin_state=s)\n"
              "r.finish(False); d.write(r); E = Dataset(d.root).episodes()\n")
    named = "\nexcept TwinloopError as e:\n    assert {w!r} in str(e), str(e)\n    raise"
    arm = ("x = fresh('arm').with_suffix('.xml'); x.write_text('<mujoco><option timestep=\"0.01\"/><worldbody><body>"
           "<joint name=\"j\" type=\"hinge\" range=\"-90 90\" limited=\"true\"/><geom size=\".02\" mass=\".1\"/>"
           "</body></worldbody><actuator><position joint=\"j\" ctrlrange=\"-1 1\"/></actuator>{key}</mujoco>')\n"
           "from twinloop.tasks import SceneTask, Residual\n")
    run = "['run', '--task', 'block-push', '--episodes', '1', '--max-ticks', '3', '-k', '4', '--no-video']"
    errors = {
        "success of a short qpos, every task": "from twinloop.tasks import TASKS\nfor n in TASKS:\n    try:\n        make_task(n).success(np.zeros(3))\n    except TwinloopError:\n        continue\n    raise AssertionError(n)\nraise TwinloopError('all refused')",
        "param check of a scalar": "BP.param_space().check(0.5)",
        "param apply to a string": "S = BP.param_space(); S.apply('model', S.nominal)",
        "refine with a nan prior names the prior": "r = Refiner(BP, TWIN, make_optimizer('mppi'), RefinerConfig(num_samples=4, horizon=.3)); p = r.refine(S0).plan\ntry:\n    r.refine(S0, prior=type(p)(np.full_like(p.knots, np.nan), p.spec))" + named.format(w="prior plan"),
        "shifted world of None": "ShiftedWorld(None)",
        "sim world of None": "SimWorld(None)",
        "gym world reset None": "from twinloop.worlds.gym import GymWorld; GymWorld('Pendulum-v1').reset(None)",
        "ragged array names its argument": "from twinloop.errors import as_array\ntry:\n    as_array([[1, 2], [3]], 'ctrl')" + named.format(w="ctrl"),
        "sim world with another scene's model": "SimWorld(BP, model=PT.model)",
        "calibrate episodes of another task": pt_eps + "calibrate(BP, E, BP.param_space(), config=CalibConfig(max_evals=5))",
        "gap on episodes of another task": pt_eps + "gap(BP, E)",
        "distill demos of another task": pt_eps + "from twinloop.policies.distilled import training_arrays, PolicyConfig; training_arrays(BP, E, PolicyConfig(), 3)",
        "write another task's episode": "d = Dataset.create(fresh(), {'fps': 10, 'task': 'block-push'}); r = EpisodeRecorder.for_task(PT, 0); s = PT.initial_state(np.random.default_rng(0)); r.add(0, np.zeros(len(PT.obs_names)), PT.hold_action(s), twin_state=s); d.write(r)",
        "episodes of another scene of the task": "from twinloop.data import check_recorded_on, recorded_on\nP = make_task('block-push', contacts='pairs'); e = type('E', (), recorded_on(P))(); check_recorded_on(BP, [e])",
        "remote address without a port": "make_world(BP, 'remote:localhost')",
        "remote address with a bad port": "make_world(BP, 'remote:localhost:99999')",
        "cli remote without a port": f"cli(*{run}, '--world', 'remote:localhost', '--out', fresh())",
        "calibrate a run folder names episodes/refined": f"d = fresh(); cli(*{run}, '--out', d)\ntry:\n    cli('calibrate', d, '--out', fresh())" + named.format(w="episodes/refined"),
        "posterior folder names posterior.json": "from twinloop.calib.posterior import Posterior; d = fresh(); d.mkdir()\ntry:\n    Posterior.load(d)" + named.format(w="posterior.json"),
        "a residual returning an empty array": arm.format(key="") + "t = SceneTask(x, [Residual('r', 1., lambda t: t.qpos[..., 1:, :0])], error=lambda q: q[..., 0], control_period=.05)\ntry:\n    Refiner(t, make_twin('mujoco', t.model), make_optimizer('mppi'), RefinerConfig(num_samples=4, horizon=.2)).refine(t.initial_state(np.random.default_rng(0)))" + named.format(w="residual 'r'"),
        "a keyframe in degrees": arm.format(key='<keyframe><key qpos=\"45\"/></keyframe>') + "SceneTask(x, [Residual('r', 1., lambda t: t.qpos[..., 1:, :])], error=lambda q: q[..., 0], control_period=.05)",
        "a horizon of 500 s": "Refiner(BP, TWIN, make_optimizer('mppi'), RefinerConfig(horizon=500))",
        "a success dwell of nan": "t = make_task('block-push'); t.success_dwell = float('nan'); t.dwell_ticks()",
        "dataset export into a non-empty folder": "d = fresh(); d.mkdir(); (d / 'x').write_text('x'); cli('dataset', 'export', dataset(1).root, d)",
    }
    for k, code in errors.items():
        p.append((f"reliability {k}", code, "error", "reliability"))
    good = {
        "a dataset without a scene still calibrates": "from twinloop.data import check_recorded_on; check_recorded_on(BP, dataset(2).episodes())",
        "an export verifies with its plans": "from twinloop.data import export_lerobot; d = fresh(); cli('run', '--task', 'block-push', '--episodes', '1', '--max-ticks', '3', '-k', '4', '--no-video', '--out', d)\nx = export_lerobot(d / 'episodes/refined', fresh()); c = check_dataset(x); assert c.ok and c.frames == 3, c.problems\nassert 'refine.plan' in pq.read_table(x / 'data/chunk-000/file-000.parquet').column_names",
        "an export with a column dropped fails its check": "from twinloop.data import export_lerobot; x = export_lerobot(dataset(2).root, fresh()); f = x / 'data/chunk-000/file-000.parquet'; pq.write_table(pq.read_table(f).drop_columns(['cost']), f); assert not check_dataset(x).ok",
        "every task declares a dwell of two ticks or more": "from twinloop.tasks import TASKS\nassert all(make_task(n).dwell_ticks() >= 2 for n in TASKS)",
        "a world of another model of the same scene": "S = BP.param_space(); finite(SimWorld(BP, model=S.apply(BP.model, S.high)).reset(0))",
    }
    for k, code in good.items():
        p.append((f"reliability good: {k}", code, "ok", "reliability"))
    return p


def all_probes():
    return (number_probes() + rollout_probes() + params_probes() + control_probes() + task_world_probes()
            + data_probes() + calib_probes() + cli_probes() + reliability_probes())


# -- the kill campaign ------------------------------------------------------------------------------

KILL_WRITER = r'''
import os, signal, sys
import numpy as np
from twinloop.data import Dataset, EpisodeRecorder

def episode(i):
    rng = np.random.default_rng(i)
    rec = EpisodeRecorder(i)
    for k in range(3 + i % 5):
        rec.add(0.1 * k, rng.normal(size=4), rng.normal(size=2), twin_state=(rng.normal(size=3), rng.normal(size=3)))
    rec.finish(bool(i % 2))
    return rec

def write_all(root, n):
    ds = Dataset.create(root, {"fps": 10, "task": "kill"}, mode="resume")
    for i in range(len(ds), n):
        ds.write(episode(i))

if __name__ == "__main__":
    count, kill_at = [0], int(os.environ.get("KILL_AT", "0"))
    def hook(fn):
        def wrapped(*a, **k):
            count[0] += 1
            if count[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return fn(*a, **k)
        return wrapped
    os.replace, os.symlink, os.fsync = hook(os.replace), hook(os.symlink), hook(os.fsync)
    if sys.argv[3] == "verify":
        from twinloop.errors import TwinloopError
        import pyarrow.parquet as pq
        try:
            ds = Dataset(sys.argv[1])
        except TwinloopError as exc:
            print("refused" if "not a dataset" in str(exc) else "refused-other:" + str(exc))
            sys.exit(0)
        ok = ds.indices == list(range(len(ds)))
        index = []
        for i in ds.indices:
            got, want = ds.read(i), episode(i).to_table()
            ok &= np.array_equal(got.obs, np.stack(want.column("observation.state").to_pylist()))
            ok &= got.success == bool(i % 2)
            index += pq.read_table(ds.path(i)).column("index").to_pylist()
        ok &= index == list(range(len(index)))
        write_all(sys.argv[1], int(sys.argv[2]))  # resume
        ok &= len(Dataset(sys.argv[1])) == int(sys.argv[2])
        print("exact" if ok else "half-right")
        sys.exit(0)
    print("ready", flush=True)
    write_all(sys.argv[1], int(sys.argv[2]))
    print(count[0], flush=True)
'''


def kill_campaign(n_episodes: int, random_kills: int, tmp: Path, seed: int = 0) -> tuple[Counter, list]:
    script = tmp / "kill_writer.py"
    script.write_text(KILL_WRITER)

    def start(root, env=None):
        return subprocess.Popen([sys.executable, str(script), str(root), str(n_episodes), "write"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})

    def verify(root) -> str:
        r = subprocess.run([sys.executable, str(script), str(root), str(n_episodes), "verify"], capture_output=True,
                           text=True, timeout=120)
        if r.returncode < 0:
            return "segfault"
        if r.returncode != 0:
            return "unclear crash"
        out = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
        return {"exact": "fine", "refused": "clear error", "half-right": "silent wrong"}.get(out, "unclear crash")

    p = start(tmp / "kill_full")
    p.stdout.readline()
    t0 = time.perf_counter()
    out, _ = p.communicate(timeout=300)
    t_write = time.perf_counter() - t0
    steps = int(out.split()[-1])
    counts, rows = Counter(), []
    for k in range(1, steps + 1):  # before every commit-step syscall
        root = tmp / f"kill_at_{k}"
        q = start(root, {"KILL_AT": str(k)})
        q.communicate(timeout=300)
        cls = verify(root) if q.returncode == -signal.SIGKILL else "unclear crash"
        counts[cls] += 1
        rows.append((f"kill before step {k}", cls))
    rng = np.random.default_rng(seed)
    for j in range(random_kills):  # at random instants
        root = tmp / f"kill_random_{j}"
        q = start(root)
        q.stdout.readline()
        time.sleep(rng.uniform(0, t_write))
        q.send_signal(signal.SIGKILL)
        q.communicate(timeout=300)
        cls = verify(root)
        counts[cls] += 1
        rows.append((f"kill at random instant {j}", cls))
    return counts, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a probe counts as a hang")
    ap.add_argument("--kill-episodes", type=int, default=4)
    ap.add_argument("--random-kills", type=int, default=20)
    ap.add_argument("--json", default="", help="write every probe's outcome here")
    ap.add_argument("--show", default="silent wrong,unclear crash,hang,segfault", help="classes to list by probe")
    ap.add_argument("--areas", default="", help="only these probe areas, comma-separated (e.g. reliability)")
    ap.add_argument("--no-kills", action="store_true", help="skip the kill campaign")
    args = ap.parse_args()
    t_start = time.perf_counter()
    areas = {a.strip() for a in args.areas.split(",") if a.strip()}
    probes = [x for x in all_probes() if not areas or x[3] in areas]
    by_area: dict[str, Counter] = defaultdict(Counter)
    records = []
    with tempfile.TemporaryDirectory(prefix="twinloop-fuzz-") as tmp:
        worker = Worker(args.timeout, tmp)
        try:
            for name, code, expect, area in probes:
                res = worker.run(textwrap.dedent(code))
                cls = classify(expect, res)
                by_area[area][cls] += 1
                records.append({"probe": name, "area": area, "expect": expect, "class": cls, "msg": res.get("msg", "")})
        finally:
            worker.close()
        if not args.no_kills:
            kills, kill_rows = kill_campaign(args.kill_episodes, args.random_kills, Path(tmp))
            by_area["kills (dataset writer)"] = kills
            records += [{"probe": n, "area": "kills", "expect": "exact or refused", "class": c, "msg": ""}
                        for n, c in kill_rows]

    head = f"| area | probes | {' | '.join(CLASSES)} |"
    print(head)
    print("|" + "---|" * (len(CLASSES) + 2))
    total = Counter()
    for area, c in by_area.items():
        total += c
        print(f"| {area} | {sum(c.values())} | " + " | ".join(str(c[k]) for k in CLASSES) + " |")
    print(f"| **all** | {sum(total.values())} | " + " | ".join(f"**{total[k]}**" for k in CLASSES) + " |")
    show = {s.strip() for s in args.show.split(",")}
    for r in records:
        if r["class"] in show:
            print(f"  {r['class']}: {r['probe']}  {r['msg']}")
    print(f"wall time {time.perf_counter() - t_start:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
