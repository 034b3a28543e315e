"""The structural-twins benchmark's refined controller is the one ``twinloop run`` builds: the
same configuration and acceptance rule, so the same world seed gives the same episode."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("pymunk")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import structural_twins as bench  # noqa: E402

from twinloop.calib.structure import fit_candidates  # noqa: E402
from twinloop.run.build import controller_in_world  # noqa: E402
from twinloop.run.compare import RunConfig  # noqa: E402
from twinloop.run.config import set_path  # noqa: E402
from twinloop.run.experiment import run_episode  # noqa: E402
from twinloop.tasks import make_task  # noqa: E402
from twinloop.worlds import make_world  # noqa: E402

SEED = 303  # a validation seed on which sending every refined plan ends elsewhere than the robust rule


@pytest.mark.parametrize("accept", ["robust", "always"])
def test_benchmark_controller_runs_the_cli_episode(accept):
    task = make_task("block-push")
    nominal = fit_candidates(task, [], contact_models=(), timestep=bench.STEP)[0]
    # twinloop run --task block-push --world pymunk --proposer open-loop --seed 11 --set planner.refiner.accept=...
    cfg = RunConfig(task="block-push", world="pymunk", proposer="open-loop", episodes=1, seed=11, video=False,
                    record=False)
    if accept != "robust":  # the run's default
        cfg = set_path(cfg, "planner.refiner.accept", accept)
    own, cli = controller_in_world(cfg, "refined")
    own.close()
    ours = bench.controller_of(nominal, bench.run_config("block-push", "pymunk", accept), task)
    assert ours.refiner.config == cli.refiner.config
    assert [type(h) for h in ours.hooks] == [type(h) for h in cli.hooks]
    world = make_world(task, "pymunk")
    a, b = run_episode(world, ours, SEED, record=False), run_episode(world, cli, SEED, record=False)
    assert (a.success, a.ticks, a.final_error) == (b.success, b.ticks, b.final_error)


def test_the_acceptance_rule_changes_the_episode():
    """What the benchmark's controllers silently left out made a difference on this seed."""
    task = make_task("block-push")
    nominal = fit_candidates(task, [], contact_models=(), timestep=bench.STEP)[0]
    world = make_world(task, "pymunk")
    r = [run_episode(world, bench.controller_of(nominal, bench.run_config("block-push", "pymunk", a), task), SEED,
                     record=False) for a in ("robust", "always")]
    assert r[0].final_error != r[1].final_error
