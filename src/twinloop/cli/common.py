"""What every command shares: the console, progress bars, the error guard, registry choices."""

from __future__ import annotations

import functools
import math
import re
import threading
from collections import Counter
from contextlib import contextmanager

import mujoco
import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from twinloop.errors import TwinloopError
from twinloop.run.executor import make_executor

console = Console()
OUT_HELP = "Output folder; must be new or empty unless --overwrite (see twinloop.io.output_folder)."
NOISE_HELP = "Sampling noise, a fraction of each action's half-range (0: the task's, else the optimizer's default)."


def optimizer_help(names) -> str:
    """Help for an ``--optimizer`` option whose default (None) is the task's preference."""
    return one_of(names) + " (default: the task's, mppi unless it names another)"


def one_of(registry, what: str = "") -> str:
    """Help text listing a registry's names (the CLI never spells them out by hand)."""
    names = " | ".join(registry)
    return f"{what} {names}".strip() if what else names


def progress_bar() -> Progress:
    return Progress(TextColumn("[bold]{task.description:<10}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=console, transient=False)


@contextmanager
def progress_ticks():
    """A progress display yielding ``tick(label, done, total)``: one bar per label."""
    with progress_bar() as prog:
        bars = {}

        def tick(label, done, total):
            if label not in bars:
                bars[label] = prog.add_task(label, total=total)
            prog.update(bars[label], completed=done)

        yield tick


@contextmanager
def executor_options(name: str, address: str | None):
    """The executor of ``--executor`` / ``--address``, closed when the command ends."""
    with make_executor(name, address) as ex:
        yield ex


def results_table(summary: dict) -> Table:
    from twinloop.viz.plots import world_label

    t = Table(title=f"{summary['task']} in {world_label(summary['world'])} world "
                    f"({summary['episodes']} episodes per controller, seed {summary['seed']})")
    realtime = any("realtime" in r for r in summary["results"])
    unit = summary.get("error_unit") or "task units"
    cols = ["controller", "success (episodes)", "95% CI", f"final error ({unit}, mean)", "control rate (Hz)"]
    cols += ["deadline misses", "plan cycles > period", "samples / cycle (median)"] if realtime else []
    for col in cols:
        t.add_column(col, justify="right" if col != "controller" else "left")
    for r in summary["results"]:
        lo, hi = r["success_ci"]
        row = [r["controller"], f"{100 * r['success_rate']:.0f}% ({r['successes']}/{r['episodes']})",
               f"[{100 * lo:.0f}%, {100 * hi:.0f}%]", f"{r['mean_final_error']:.4f}", f"{r['control_hz']:.1f}"]
        if realtime:
            rt = r.get("realtime", {})
            row += [f"{rt.get('misses', 0)}/{rt.get('ticks', 0)}",
                    f"{rt['overruns']}/{rt['cycles']}" if "cycles" in rt else "-",
                    f"{rt['samples_median']:.0f}" if math.isfinite(rt.get("samples_median", math.nan)) else "-"]
        t.add_row(*row)
    return t


def guard(fn):
    """Turn every expected failure into a one-line message and exit code 2: bad input
    (:class:`TwinloopError`) and the operating system refusing a file (``OSError``: a full
    disk, a missing permission). Anything else is a bug and keeps its traceback."""

    @functools.wraps(fn)
    def wrapper(*a, **kw):
        try:
            with MujocoWarnings():
                return fn(*a, **kw)
        except TwinloopError as exc:
            console.print(f"[red]error:[/] {exc}", soft_wrap=True)
            raise typer.Exit(2) from exc
        except OSError as exc:
            where = f" {exc.filename}" if exc.filename else ""
            console.print(f"[red]error:[/] cannot access{where}: {exc.strerror or exc}", soft_wrap=True)
            raise typer.Exit(2) from exc
        except KeyboardInterrupt as exc:  # Ctrl-C: datasets keep every committed episode (and a cut one's frames)
            console.print("[yellow]interrupted:[/] stopped; what was recorded so far is kept and verifiable "
                          "(twinloop dataset check)", soft_wrap=True)
            raise typer.Exit(130) from exc

    return wrapper


class MujocoWarnings:
    """MuJoCo's warnings during a command, counted and summed up in one line at its end.

    MuJoCo prints each warning as it happens ("Nan, Inf or huge value in QACC ... The
    simulation is unstable"): a twin sampling K candidates at a coarse step can print hundreds
    a run, one per candidate that diverged, although the twin already flags those rollouts
    unstable and the refiner drops them (and a world's own instability is reported per
    episode). Inside ``with MujocoWarnings():`` they are counted by kind instead (numbers
    masked) and printed once on exit; the previous handler is restored.
    """

    def __init__(self):
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._previous = None

    def __call__(self, message: str) -> None:  # called by MuJoCo, from any rollout thread
        kind = re.sub(r"\d+(\.\d+)?", "#", str(message).strip().split("Time =")[0].strip())
        with self._lock:
            self.counts[kind] += 1

    def __enter__(self) -> MujocoWarnings:
        self._previous = mujoco.get_mju_user_warning()
        mujoco.set_mju_user_warning(self)
        return self

    def __exit__(self, *exc) -> None:
        mujoco.set_mju_user_warning(self._previous)
        if self.counts:
            kinds = "; ".join(f"{n} x '{kind}'" for kind, n in self.counts.most_common(3))
            console.print(f"[yellow]note:[/] MuJoCo warned {self.counts.total()} times ({kinds}). "
                          "Unstable candidate rollouts are flagged and dropped by the refiner; "
                          "a world's own instability is reported per episode.", soft_wrap=True)
