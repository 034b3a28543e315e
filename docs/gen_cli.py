"""Write the CLI reference (docs/reference/cli.md) from the command line's own help.

    python docs/gen_cli.py            # rewrite docs/reference/cli.md
    python docs/gen_cli.py --check    # exit 1 if the committed page is stale

Every command's summary, usage, arguments and options come from the typer app itself, so the
page says what ``twinloop COMMAND --help`` says; regenerate it after changing the CLI.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import typer

PAGE = Path(__file__).parent / "reference" / "cli.md"
HEADER = """# Command-line reference

Generated from the command line's own help by `python docs/gen_cli.py`; do not edit by hand.
`twinloop COMMAND --help` prints the same text. `twinloop --version` prints the installed
version.
"""


def _escape(text: str) -> str:
    """Help text as Markdown that renders verbatim (no HTML tags, no emphasis)."""
    text = text.replace("\\", "\\\\")
    for ch in "<>":
        text = text.replace(ch, {"<": "&lt;", ">": "&gt;"}[ch])
    return re.sub(r"([*_`\[\]])", r"\\\1", text)


def _command_section(name: str, command, depth: int) -> list[str]:
    ctx = command.make_context(name, [], resilient_parsing=True)
    usage = command.get_usage(ctx).replace("Usage: ", "", 1).strip()
    lines = [f"{'#' * depth} `{name}`", ""]
    if command.help:
        lines += [_escape(" ".join(command.help.split())), ""]
    lines += ["```text", usage, "```", ""]
    for kind, title in (("argument", "Arguments"), ("option", "Options")):
        records = [p.get_help_record(ctx) for p in command.params if p.param_type_name == kind]
        records = [r for r in records if r]
        if kind == "argument":  # click gives arguments no help record; typer does
            records = [r for r in records if r[0]]
        if not records:
            continue
        lines += [f"**{title}**", ""]
        for decl, text in records:
            lines.append(f"- `{decl}`: {_escape(' '.join(text.split()))}" if text else f"- `{decl}`")
        lines.append("")
    return lines


def render() -> str:
    """The reference page, as text."""
    from twinloop.cli import app

    root = typer.main.get_command(app)
    lines = [HEADER]
    lines += _command_section("twinloop", root, 2)[2:]  # the top level: no heading of its own
    for name, command in root.commands.items():
        sub = getattr(command, "commands", None)
        lines += _command_section(f"twinloop {name}", command, 2)
        for sub_name, sub_command in (sub or {}).items():
            lines += _command_section(f"twinloop {name} {sub_name}", sub_command, 3)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed page is stale")
    parser.add_argument("--out", type=Path, default=PAGE, help="where to write the page")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not args.out.is_file() or args.out.read_text() != text:
            print(f"{args.out} is stale: run python docs/gen_cli.py", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
