"""`twinloop dataset check DIR`: verify a dataset folder (metadata, every episode, leftovers);
`twinloop dataset export DIR OUT`: write it for LeRobot (v3.0)."""

from __future__ import annotations

from pathlib import Path

import typer

from twinloop.cli.common import console, guard
from twinloop.data import check as check_dataset
from twinloop.data import export_lerobot
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


@group.command()
@guard
def export(
    root: str = typer.Argument(..., help="A twinloop dataset folder (e.g. a run's episodes/refined)."),
    out: str = typer.Argument(..., help="Folder for the LeRobot dataset; must be new or empty unless --overwrite."),
    overwrite: bool = typer.Option(False, help="Replace a LeRobot dataset already at OUT."),
    episodes_per_file: int = typer.Option(1000, help="Episodes per data file."),
):
    """Export a dataset in LeRobot's v3.0 layout (lerobot 0.4's LeRobotDataset loads it), every
    column kept (refine.plan: the refined plans a policy can imitate); then verified as
    `twinloop dataset check OUT` does."""
    if not Path(root).exists():
        raise TwinloopError(f"no such folder: {root}")
    path = export_lerobot(root, out, overwrite=overwrite, episodes_per_file=episodes_per_file)
    res = check_dataset(path)
    if not res.ok:
        raise TwinloopError(f"the export at {path} does not verify: {'; '.join(res.problems)}")
    console.print(f"wrote {path}: {res.episodes} episodes, {res.frames} frames, verified", soft_wrap=True)


GROUPS = {"dataset": group}
