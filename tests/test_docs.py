"""The documentation: tutorials whose code runs, generated pages that are current, a README
that is a door, `twinloop --version`."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import shlex
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from twinloop.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TUTORIALS = sorted((DOCS / "tutorials").glob("*.md")) + [DOCS / "interfaces.md", DOCS / "getting-started.md"]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)


def _script(name: str):
    """A generator script under docs/, imported as a module."""
    spec = importlib.util.spec_from_file_location(f"docs_{name}", DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def blocks(path: Path, lang: str) -> list[str]:
    """The fenced code blocks of one language in a Markdown file, in order."""
    return [body for kind, body in FENCE.findall(path.read_text()) if kind == lang]


def test_version_prints_the_installed_package_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"twinloop {importlib.metadata.version('twinloop')}"


@pytest.mark.parametrize("page", TUTORIALS, ids=lambda p: p.stem)
def test_tutorial_code_runs(page, tmp_path, monkeypatch):
    """Every ```python block of a tutorial (and of the interfaces and getting-started pages) runs, in order, in one namespace, in a fresh folder."""
    code = blocks(page, "python")
    if page.stem == "index":
        assert not code, "the tutorials' index holds no code"
        return
    assert code, f"{page.name} has no python block"
    if page.stem == "distill":
        pytest.importorskip("torch")  # the [learn] extra
    monkeypatch.chdir(tmp_path)
    saved = {name: dict(registry) for name, registry in _registries().items()}
    namespace = {"__name__": f"tutorial_{page.stem.replace('-', '_')}"}
    try:
        for i, block in enumerate(code):
            exec(compile(block, f"{page.name}[block {i}]", "exec"), namespace)  # noqa: S102
    finally:  # what a tutorial registers stays out of the other tests
        for name, registry in _registries().items():
            registry.clear()
            registry.update(saved[name])


def _registries() -> dict[str, dict]:
    from twinloop.policies import PROPOSERS
    from twinloop.tasks import TASKS

    return {"tasks": TASKS, "proposers": PROPOSERS}


def _twinloop_lines(text: str):
    """The `twinloop ...` command lines of a Markdown text's bash blocks (continuations joined)."""
    for body in [b for kind, b in FENCE.findall(text) if kind in ("bash", "sh")]:
        for line in body.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if line.startswith("twinloop "):
                yield line


def test_documented_commands_parse_with_the_current_cli():
    """Each `twinloop ...` line in the docs' and README's bash blocks names a command and
    options that exist (parsed, not run)."""
    root = typer.main.get_command(app)
    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    checked, failures = 0, []
    for page in pages:
        for line in _twinloop_lines(page.read_text()):
            args = shlex.split(line)[1:]
            if "--help" in args or "--version" in args:
                continue
            command, name = root, "twinloop"
            while getattr(command, "commands", None) and args and args[0] in command.commands:
                name, command = f"{name} {args[0]}", command.commands[args[0]]
                args = args[1:]
            try:
                assert command is not root, "names no command"
                command.make_context(name, list(args))
            except Exception as exc:  # click's usage errors
                failures.append(f"{page.relative_to(ROOT)}: {line!r}: {exc}")
            checked += 1
    assert not failures, "documented commands that do not parse:\n" + "\n".join(failures)
    assert checked >= 10


def test_cli_reference_is_current(tmp_path):
    gen = _script("gen_cli")
    out = tmp_path / "cli.md"
    assert gen.main(["--out", str(out)]) == 0
    assert out.read_text() == (DOCS / "reference" / "cli.md").read_text(), \
        "docs/reference/cli.md is stale: run python docs/gen_cli.py"


def test_results_pages_are_current(tmp_path):
    gen = _script("gen_results")
    gen.write_book(tmp_path)
    committed = DOCS / "results"
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.md"))
    assert made == sorted(p.relative_to(committed) for p in committed.rglob("*.md")), \
        "docs/results/ has other pages than the generator makes: run python docs/gen_results.py"
    for rel in made:
        assert (tmp_path / rel).read_text() == (committed / rel).read_text(), \
            f"docs/results/{rel} is stale: run python docs/gen_results.py"


def test_table_of_other_rows_lists_their_plain_values(tmp_path):
    """A table whose rows are not "task | world" runs shows each row's numbers, texts and
    intervals, and leaves nested values to the source file."""
    gen = _script("gen_results")
    path = tmp_path / "screen.json"
    path.write_text(json.dumps({"rows": {"local:64:1": {"successes": 62, "ci": [0.522, 0.709], "detail": {"x": 1}},
                                         "local:32:1": {"successes": 55, "command": "python b.py --k 32"}}}))
    page = gen.table_page(path)
    assert "| row | successes | ci | command |" in page
    assert "| local:64:1 | 62 | [0.522, 0.709] | - |" in page
    assert "| local:32:1 | 55 | - | `python b.py --k 32` |" in page
    assert "detail" not in page
    # a grid's list of rows: numbered in their order
    path.write_text(json.dumps({"rows": [{"arc_time": 2.0, "successes": 86}, {"arc_time": 0.8, "successes": 54}]}))
    page = gen.table_page(path)
    assert "| 1 | 2 | 86 |" in page and "| 2 | 0.8 | 54 |" in page


def test_readme_is_a_door():
    text = (ROOT / "README.md").read_text()
    lines = text.splitlines()
    assert len(lines) <= 300
    assert lines[2] == "```bash"
    assert lines[3].endswith("pip install -e . && twinloop demo")
    assert "python -m pytest -q" in lines[4]
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        path = (ROOT / target).resolve()
        assert path.is_relative_to(ROOT), f"README links outside the repository: {target}"
        assert path.exists(), f"README links a missing file: {target}"


def test_readme_and_site_home_link_each_main_use_directly():
    """Run a task, add a task, calibrate, evaluate, distill, connect a robot: one link from the
    README and from the site's home page to the page that shows how."""
    uses = ["getting-started.md", "tutorials/custom-task.md", "tutorials/calibrate.md",
            "tutorials/evaluate.md", "tutorials/distill.md", "tutorials/connect-a-robot.md"]
    readme = {t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text())}
    home = {t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", (DOCS / "index.md").read_text())}
    for use in uses:
        assert f"docs/{use}" in readme, f"README does not link {use}"
        assert use in home, f"docs/index.md does not link {use}"
