"""What a command-line user is told when an address, a folder or a file is not what a
command wants: what to pass instead, never a traceback or an API call to make."""

from __future__ import annotations

import socket

import pytest
from typer.testing import CliRunner

from twinloop.calib.posterior import Posterior
from twinloop.cli import app
from twinloop.data import Dataset, recorded_on
from twinloop.errors import TwinloopError

runner = CliRunner()


def _one_line_error(res, message: str) -> None:
    assert res.exit_code == 2, res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert lines[-1].startswith("error:") and message in lines[-1], res.output
    assert "Traceback" not in res.output


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(("world", "message"), [
    ("remote:localhost", "has no port: give HOST:PORT, e.g. remote:localhost:5555"),
    ("remote:localhost:http", "port must be an integer 1..65535"),
    ("remote:localhost:70000", "port must be an integer 1..65535"),
    ("remote:udp://localhost:5", "only tcp:// is served"),
])
def test_a_remote_address_without_a_good_port_is_named(tmp_path, world, message):
    pytest.importorskip("zmq")
    res = runner.invoke(app, ["run", "--task", "block-push", "--world", world, "--episodes", "1", "--no-video",
                              "--out", str(tmp_path / "o")])
    _one_line_error(res, message)


def test_a_missing_server_tells_how_to_start_one():
    pytest.importorskip("zmq")
    from twinloop.worlds.remote import RemoteWorld, WorldLost

    port = _free_port()
    with pytest.raises(WorldLost, match=rf"no world server answers at tcp://localhost:{port}") as err:
        RemoteWorld(f"localhost:{port}", timeout=0.2)
    assert f"twinloop serve-world --task TASK --port {port}" in str(err.value)
    assert "reconnect()" not in str(err.value)


def test_calibrate_on_a_run_folder_names_its_refined_episodes(tmp_path, block_push):
    run = tmp_path / "run"
    for side in ("base", "refined"):
        Dataset.create(run / "episodes" / side, {"fps": 10, **recorded_on(block_push)})
    res = runner.invoke(app, ["calibrate", str(run)])
    _one_line_error(res, f"pass {run / 'episodes' / 'refined'}")


def test_a_posterior_folder_names_the_posterior_json_inside(tmp_path):
    (tmp_path / "posterior.json").write_text("{}")
    with pytest.raises(TwinloopError, match=r"is a folder; pass the posterior.json inside it: .*posterior.json"):
        Posterior.load(tmp_path)
    with pytest.raises(TwinloopError, match="none there"):
        Posterior.load(tmp_path / "..")
