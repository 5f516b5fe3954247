"""No function longer than 80 lines in the harness and the planners (``*_src/dispatch*.py``),
measured as the span of the ``def`` from its first decorator to its last line. A function that
must stay longer is listed below with its reason; an entry that is no longer needed fails too."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 80

#: "path:function" -> why it is still longer (aim: empty)
LONG: dict[str, str] = {}   # function -> why it may stay longer (none today)


def _files():
    yield from sorted((ROOT / "harness").rglob("*.py"))
    yield from sorted(ROOT.glob("*_src/dispatch*.py"))


def function_spans(path: Path):
    """(qualified name, lines) of every function and method of ``path``."""
    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                yield f"{prefix}{child.name}", child.end_lineno - first + 1
                yield from walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)
    yield from walk(ast.parse(path.read_text(), str(path)), "")


def test_the_measure_counts_decorators_and_nested_functions(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import functools\n\n@functools.cache\ndef outer():\n    def inner():\n        return 1\n"
                 "    return inner\n\n\nclass C:\n    def method(self):\n        pass\n")
    assert dict(function_spans(f)) == {"outer": 5, "outer.inner": 2, "C.method": 2}


def test_no_function_longer_than_80_lines():
    long = {}
    for path in _files():
        rel = path.relative_to(ROOT).as_posix()
        for name, lines in function_spans(path):
            if lines > MAX_LINES:
                long[f"{rel}:{name}"] = lines
    unlisted = {k: v for k, v in long.items() if k not in LONG}
    assert not unlisted, f"functions over {MAX_LINES} lines (split them, or list them in LONG with the reason): {unlisted}"
    stale = sorted(set(LONG) - set(long))
    assert not stale, f"listed in LONG but no longer over {MAX_LINES} lines: remove {stale}"
