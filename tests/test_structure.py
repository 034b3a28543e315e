"""Structural limits of the package: short modules, short functions."""

import ast
from pathlib import Path

import twinloop

PACKAGE = Path(twinloop.__file__).parent
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _long_functions(path: Path, root: Path = PACKAGE) -> list[str]:
    """``file:line name (n lines)`` of every function or method in ``path`` over the limit."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_module_is_over_the_line_limit():
    long = [
        f"{p.relative_to(PACKAGE)} ({n} lines)"
        for p in _modules()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_function_is_over_the_line_limit():
    long = [f for p in _modules() for f in _long_functions(p)]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_the_checker_sees_long_functions_and_methods_only(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    short = "\n".join(f"        y{i} = {i}" for i in range(MAX_FUNCTION_LINES - 2))
    path = tmp_path / "sample.py"
    path.write_text(f"def long():\n{body}\n\n\nclass A:\n    def short(self):\n{short}\n"
                    f"\n    def longer(self):\n{short}\n        a = 1\n        b = 2\n")
    found = _long_functions(path, tmp_path)
    assert [f.split()[1] for f in found] == ["long", "longer"]
