"""`twinloop view DATASET`: a recorded dataset replayed in the live view's page."""

from __future__ import annotations

import typer

from twinloop.cli.common import console, guard


@guard
def view(
    dataset: str = typer.Argument(..., help="A dataset folder (LeRobot layout, e.g. a run's episodes/refined)."),
    task: str = typer.Option(None, help="The task its episodes were recorded on (default: the one the dataset "
                             "names; another is refused)."),
    port: int = typer.Option(8080, help="The page's port (0: any free port)."),
    host: str = typer.Option("127.0.0.1", help="The page's address (0.0.0.0: every network interface)."),
    seconds: float = typer.Option(None, help="Stop serving after this many seconds (default: until Ctrl-C)."),
):
    """Replay a recorded dataset in the browser: scrub through each episode's ticks, the world's
    states solid and the twin's open-loop replay of the same actions translucent over them, with
    the gap between them over time (needs the view extra: pip install 'twinloop[view]'). A live
    run has its own page: twinloop run --view."""
    from twinloop.viz.replay import ReplayView, open_dataset

    ds, t = open_dataset(dataset, task)
    page = ReplayView(ds, t, host, port)
    console.print(f"replaying {len(ds)} episodes of {t.name} at {page.url} (Ctrl-C to stop)", soft_wrap=True)
    try:
        page.serve(seconds)
    finally:
        page.close()


COMMANDS = (view,)
