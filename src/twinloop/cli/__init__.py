"""`twinloop ...`: the command line. The loop commands (run, rsr, distill, evaluate, calibrate)
are generated from their config dataclasses (:mod:`twinloop.cli.generate`): each option's help
is its field's description, every other field takes ``--set PATH=VALUE``, and ``--recipe``
loads a shipped or written recipe; option choices come from the registries (tasks, worlds,
proposers, optimizers, backends), so a newly registered one needs no CLI edit."""

from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError, version

os.environ.setdefault("MUJOCO_GL", "egl")

import typer  # noqa: E402

from twinloop.cli import calib, dataset, distill, evaluate, perception, recipe, run, serve, view  # noqa: E402

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Rehearse each action in a digital twin before acting; keep the twin calibrated.")


def package_version() -> str:
    """The installed twinloop's version (from its package metadata)."""
    try:
        return version("twinloop")
    except PackageNotFoundError:  # a source tree on sys.path that was never installed
        return "unknown (not installed)"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"twinloop {package_version()}")
        raise typer.Exit()


@app.callback()
def _main(
    show_version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                      help="Print twinloop's version and exit."),
) -> None:
    """Rehearse each action in a digital twin before acting; keep the twin calibrated."""


for _group in (run, calib, distill, evaluate, serve, view):
    for _command in _group.COMMANDS:
        app.command()(_command)
for _name, _sub in {**dataset.GROUPS, **recipe.GROUPS, **perception.GROUPS}.items():
    app.add_typer(_sub, name=_name)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
