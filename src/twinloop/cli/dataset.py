"""`twinloop dataset check DIR`: verify a dataset folder (metadata, every episode, leftovers)."""

from __future__ import annotations

from pathlib import Path

import typer

from twinloop.cli.common import console, guard
from twinloop.data import check as check_dataset
from twinloop.errors import TwinloopError

group = typer.Typer(no_args_is_help=True, help="Inspect recorded datasets.")


@group.command()
@guard
def check(root: str = typer.Argument(..., help="A dataset folder.")):
    """Verify a dataset: metadata checksums and totals, and every episode file's checksum, row
    count and episode index. Exit code 0: verified; 1: problems found (each listed)."""
    if not Path(root).exists():
        raise TwinloopError(f"no such folder: {root}")
    res = check_dataset(root)
    for note in res.notes:
        console.print(f"note: {note}", soft_wrap=True)
    for problem in res.problems:
        console.print(f"[red]problem:[/] {problem}", soft_wrap=True)
    if res.ok:
        console.print(f"{root}: {res.episodes} episodes, {res.frames} frames, all verified", soft_wrap=True)
        return
    console.print(f"{root}: {len(res.problems)} problem(s); {res.verified} of {res.episodes} episodes verified",
                  soft_wrap=True)
    raise typer.Exit(1)


GROUPS = {"dataset": group}
