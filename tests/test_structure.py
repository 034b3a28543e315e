"""Structural limits of the package: short modules, short functions."""

import ast
from pathlib import Path

import twinloop

PACKAGE = Path(twinloop.__file__).parent
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _long_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({lines} lines)")
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


def test_the_checker_sees_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    path = tmp_path / "long.py"
    path.write_text(f"def f():\n{body}\n")
    # _long_functions reports paths relative to the package; place the file inside it virtually
    tree = ast.parse(path.read_text())
    node = tree.body[0]
    assert node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
