"""A user's own task and proposer by file, module or entry point, with no edit of twinloop."""

import json
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from twinloop.cli import app
from twinloop.errors import TwinloopError
from twinloop.policies import make_proposer
from twinloop.tasks import TASKS, check_task, make_task

runner = CliRunner()
REACH = Path(__file__).resolve().parents[1] / "examples" / "custom_scene.py"

TASK_FILE = '''
from twinloop.tasks.block_push import BlockPush

class MyPush(BlockPush):
    """block-push under the user's own name"""
    name = "my-push"

def not_a_task():
    return 42
'''

PROPOSER_FILE = '''
import numpy as np

class Still:
    """Holds the pusher where it is."""
    def __init__(self, task):
        self.task = task
        self.resets = []
    def reset(self, seed=None):
        self.resets.append(seed)
    def propose(self, obs, state):
        return np.tile(self.task.hold_action(state), (3, 1))
'''


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_a_task_loads_from_a_file_and_is_the_same_class_twice(tmp_path):
    p = _write(tmp_path, "mytasks.py", TASK_FILE)
    a, b = make_task(f"{p}:MyPush"), make_task(f"{p}:MyPush")
    assert a.name == "my-push" and type(a) is type(b)
    assert f"{p}:MyPush" not in TASKS  # nothing registered behind the user's back


def test_a_task_loads_from_a_module_on_the_path(tmp_path, monkeypatch):
    _write(tmp_path, "user_tasks_mod.py", TASK_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert make_task("user_tasks_mod:MyPush").name == "my-push"


def test_a_task_loads_from_an_installed_entry_point(tmp_path, monkeypatch):
    _write(tmp_path, "ep_tasks_mod.py", TASK_FILE)
    dist = tmp_path / "user_robot-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: user-robot\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[twinloop.tasks]\narm-push = ep_tasks_mod:MyPush\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert check_task("arm-push") == "arm-push"
    assert make_task("arm-push").name == "my-push"
    listed = runner.invoke(app, ["tasks"])
    assert listed.exit_code == 0 and "arm-push" in listed.output


@pytest.mark.parametrize(
    "spec, message",
    [
        ("arm-push", "unknown task 'arm-push'; choose one of: bar-lift, block-push"),
        ("arm-push", "path/to/file.py:Name"),
        ("{d}/missing.py:MyPush", "missing.py' not found"),
        ("{d}/mytasks.py:Nope", "has no 'Nope'; it defines: MyPush, not_a_task"),
        ("no_such_module_xyz:Task", "task module 'no_such_module_xyz' not found"),
        ("{d}/broken.py:X", "failed to import: SyntaxError"),
        ("{d}/mytasks.py:not_a_task", "its factory returned int, not a Task"),
    ],
)
def test_a_task_that_cannot_be_loaded_says_why(tmp_path, spec, message):
    _write(tmp_path, "mytasks.py", TASK_FILE)
    _write(tmp_path, "broken.py", "def (:\n")
    with pytest.raises(TwinloopError, match=None) as exc:
        make_task(spec.format(d=tmp_path))
    assert message in str(exc.value)


def test_a_proposer_loads_from_a_file_and_is_checked(tmp_path):
    p = _write(tmp_path, "mypolicy.py", PROPOSER_FILE)
    task = make_task("block-push")
    prop = make_proposer(task, f"{p}:Still")
    assert prop.task is task and prop.propose(None, task.initial_state(__import__("numpy").random.default_rng(0))).shape == (3, task.nu)
    bad = _write(tmp_path, "bad.py", "class NoPropose:\n    def __init__(self, task):\n        pass\n")
    with pytest.raises(TwinloopError, match="has no propose"):
        make_proposer(task, f"{bad}:NoPropose")
    with pytest.raises(TwinloopError, match="unknown proposer 'mine'"):
        make_proposer(task, "mine")


def test_run_takes_a_task_and_a_proposer_from_files(tmp_path):
    p = _write(tmp_path, "mypolicy.py", PROPOSER_FILE)
    out = tmp_path / "out"
    res = runner.invoke(app, ["run", "--task", f"{REACH}:make_reach_task", "--world", "nominal", "--proposer",
                              f"{p}:Still", "--episodes", "1", "--max-ticks", "3", "-k", "4", "--no-video",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())
    assert s["task"] == "reach"  # the task names itself; the config keeps where it came from
    assert [r["controller"] for r in s["results"]] == ["base", "refined"]


def test_run_with_an_unknown_task_says_how_to_name_ones_own(tmp_path):
    res = runner.invoke(app, ["run", "--task", "arm-push", "--episodes", "1", "--out", str(tmp_path)])
    assert res.exit_code == 2
    assert "path/to/file.py:Name" in " ".join(res.output.split())


def test_a_file_module_is_not_left_half_imported(tmp_path):
    bad = _write(tmp_path, "half.py", "X = 1\nraise RuntimeError('boom')\n")
    with pytest.raises(TwinloopError, match="RuntimeError: boom"):
        make_task(f"{bad}:X")
    assert not any(m.startswith("twinloop_user_half_") for m in sys.modules)


def test_demo_runs_any_task_with_its_own_defaults(tmp_path):
    p = _write(tmp_path, "mytasks.py", TASK_FILE)
    out = tmp_path / "out"
    res = runner.invoke(app, ["demo", "--task", f"{p}:MyPush", "--episodes", "1", "--no-video", "--out", str(out)])
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())
    assert s["task"] == "my-push"
    assert s["config_sources"]["planner.refiner.num_samples"] == "task"  # not the push-t demo recipe's
