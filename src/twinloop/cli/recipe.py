"""`twinloop recipe build NAME`: build (and cache) what a recipe needs before it runs."""

from __future__ import annotations

import typer

from twinloop.cli.common import console, guard
from twinloop.recipes import Recipe, load_recipe, recipe_names
from twinloop.recipes.build import build as build_recipe
from twinloop.recipes.build import built_path, is_built, needed

group = typer.Typer(no_args_is_help=True, help="Build what recipes need (distilled checkpoints, calibrations).")


@group.command()
@guard
def build(
    name: str = typer.Argument(..., help="A recipe (`twinloop recipes` lists them) or a recipe file (.toml)."),
    itself: bool = typer.Option(False, "--self", help="Also run the recipe itself into the cache."),
):
    """Build what recipe NAME needs, once, into the cache ($TWINLOOP_CACHE, default
    ~/.cache/twinloop); `twinloop run --recipe NAME` then reuses it."""
    rec = load_recipe(name)
    for dep in needed(rec):
        path = build_recipe(dep, console.print)
        console.print(f"{dep.name}: built in {path}")
    if itself:
        console.print(f"{rec.name}: built in {build_recipe(rec, console.print)}")
    elif users := needed_by(rec):
        state = "is built" if is_built(rec) else "was not built"
        console.print(f"{rec.name} itself {state} (`twinloop recipe build {rec.name} --self` builds it; "
                      f"{', '.join(users)} need it and build it when run)")
    elif not rec.needs:
        console.print(f"{rec.name} needs nothing built; run it with `twinloop {rec.command} --recipe {rec.name}`")


def needed_by(rec: Recipe) -> list[str]:
    """The shipped recipes that list ``rec`` in their ``needs``."""
    return [n for n in recipe_names() if n != rec.name and rec.name in load_recipe(n).needs]


@group.command()
@guard
def status(name: str = typer.Argument(..., help="A recipe or a recipe file (.toml).")):
    """Say whether what recipe NAME needs is built, and where."""
    rec = load_recipe(name)
    for dep in needed(rec):
        state = "built" if is_built(dep) else "not built"
        console.print(f"{dep.name}: {state} ({built_path(dep)})")
    if needed_by(rec):
        console.print(f"{rec.name} itself: {'built' if is_built(rec) else 'not built'} ({built_path(rec)})")
    elif not rec.needs:
        console.print(f"{rec.name} needs nothing built")


GROUPS = {"recipe": group}
