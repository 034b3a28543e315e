"""`twinloop dataset check DIR`: verify a dataset folder (metadata, every episode, leftovers)."""

from __future__ import annotations

from pathlib import Path

import typer

from twinloop.data.dataset import check
from twinloop.errors import TwinloopError


def register(app: typer.Typer) -> None:
    """Add the ``dataset`` command group to ``app``."""
    from twinloop.cli import _guard, console

    group = typer.Typer(no_args_is_help=True, help="Inspect recorded datasets.")
    app.add_typer(group, name="dataset")

    @group.command("check")
    @_guard
    def check_cmd(root: str = typer.Argument(..., help="A dataset folder.")):
        """Verify a dataset: metadata checksums and totals, every episode file's checksum, row
        count and episode index. Exit code 0: verified; 1: problems found (listed)."""
        if not Path(root).exists():
            raise TwinloopError(f"no such folder: {root}")
        res = check(root)
        for note in res.notes:
            console.print(f"note: {note}", soft_wrap=True)
        for problem in res.problems:
            console.print(f"[red]problem:[/] {problem}", soft_wrap=True)
        if res.ok:
            console.print(f"{root}: {res.episodes} episodes, {res.frames} frames, all verified")
            return
        console.print(f"{root}: {len(res.problems)} problem(s); {res.verified} of {res.episodes} episodes verified")
        raise typer.Exit(1)


__all__ = ["register"]
