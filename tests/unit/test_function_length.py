"""No function outside ``tests/`` is longer than 60 lines of code, and no module outside ``tests/`` is longer
than 500 lines.

The rule, read from the source with ``ast`` and ``tokenize``: a function's lines of code are the lines
of its body, from its first statement to its last line, that carry a token of code. The signature and
decorators are not part of the body; blank lines, comment-only lines and docstrings (the function's own
and those of functions and classes nested in it) do not count. A nested function counts on its own and
inside its outer function. Every ``.py`` file git tracks or would track (``git ls-files --cached
--others --exclude-standard``: a new file counts before it is added) outside ``tests/`` is checked. A
module's length is its number of lines, whatever they hold.
"""

from __future__ import annotations

import ast
import io
import subprocess
import textwrap
import tokenize
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
MAX_CODE_LINES = 60
MAX_MODULE_LINES = 500
EXEMPT_FOLDERS = ("tests/",)

_NOT_CODE = frozenset(
    {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
)
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _code_lines(source: str) -> set[int]:
    """Line numbers that carry a token of code, docstrings left out."""
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in _NOT_CODE:
            lines.update(range(token.start[0], token.end[0] + 1))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, *_DEFINITIONS)) and ast.get_docstring(node, clean=False) is not None:
            docstring = node.body[0]
            lines.difference_update(range(docstring.lineno, _end(docstring) + 1))
    return lines


def _end(node: ast.stmt) -> int:
    return node.end_lineno or node.lineno


def _body_start(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The first line of the body: its first statement, or that statement's first decorator."""
    first = function.body[0]
    if isinstance(first, _DEFINITIONS):
        return min([first.lineno, *(decorator.lineno for decorator in first.decorator_list)])
    return first.lineno


def function_lengths(source: str) -> dict[str, int]:
    """Lines of code of every function in ``source``, keyed by qualified name (``Class.method``,
    ``outer.inner``)."""
    code = _code_lines(source)
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _DEFINITIONS):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    lengths[name] = len(code.intersection(range(_body_start(child), _end(child) + 1)))
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return lengths


def _checked_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=REPO,
        capture_output=True,
        check=True,
    )
    names = (name for name in listed.stdout.decode("utf-8").split("\0") if name)
    return sorted(name for name in names if not name.startswith(EXEMPT_FOLDERS))


def _all_lengths() -> dict[tuple[str, str], int]:
    return {
        (path, name): length
        for path in _checked_files()
        for name, length in function_lengths((REPO / path).read_text(encoding="utf-8")).items()
    }


def over_the_limit(lengths: dict[tuple[str, str], int]) -> list[str]:
    """One line per function of ``lengths`` over the limit."""
    return sorted(
        f"{path}: {name} has {length} lines of code (at most {MAX_CODE_LINES})"
        for (path, name), length in lengths.items()
        if length > MAX_CODE_LINES
    )


def test_no_function_outside_tests_is_over_the_limit() -> None:
    lengths = _all_lengths()
    assert ("orderflow/protocol/step_start.py", "decide_step_start") in lengths  # the walk found the code
    assert ("demo/services/app.py", "create_app") in lengths  # and the demo's
    assert ("bench/runner.py", "run_bench") in lengths  # and the benchmark's
    assert not any(path.startswith(EXEMPT_FOLDERS) for path, _ in lengths)
    assert over_the_limit(lengths) == []


def long_modules(line_counts: dict[str, int]) -> list[str]:
    """One line per module of ``line_counts`` (path -> lines) over :data:`MAX_MODULE_LINES`."""
    return sorted(
        f"{path} has {lines} lines (at most {MAX_MODULE_LINES})"
        for path, lines in line_counts.items()
        if lines > MAX_MODULE_LINES
    )


def _module_lines() -> dict[str, int]:
    return {path: len((REPO / path).read_text(encoding="utf-8").splitlines()) for path in _checked_files()}


def test_no_module_outside_tests_is_over_the_limit() -> None:
    line_counts = _module_lines()
    assert "orchestrators/workflow/run.py" in line_counts and "bench/runner.py" in line_counts
    assert not any(path.startswith(EXEMPT_FOLDERS) for path in line_counts)
    assert long_modules(line_counts) == []


@pytest.mark.parametrize(("lines", "caught"), [(MAX_MODULE_LINES, False), (MAX_MODULE_LINES + 1, True)])
def test_a_module_over_the_limit_is_caught_and_one_at_it_is_not(lines: int, caught: bool) -> None:
    assert bool(long_modules({"orderflow/example.py": lines})) is caught


def _function_of(code_lines: int) -> str:
    """A function whose body is ``code_lines`` lines of code."""
    body = "".join(f"    x{index} = {index}\n" for index in range(code_lines - 1))
    return f'def long() -> int:\n    """Docstring."""\n{body}    return x0\n'


@pytest.mark.parametrize(("code_lines", "caught"), [(MAX_CODE_LINES, False), (MAX_CODE_LINES + 1, True)])
def test_a_function_over_the_limit_is_caught_and_one_at_it_is_not(code_lines: int, caught: bool) -> None:
    lengths = function_lengths(_function_of(code_lines))
    assert lengths == {"long": code_lines}
    assert bool(over_the_limit({("orderflow/example.py", "long"): lengths["long"]})) is caught


def test_the_signature_docstrings_comments_and_blank_lines_do_not_count() -> None:
    source = textwrap.dedent(
        '''
        @decorator(
            option=1,
        )
        def f(
            a: int,
        ) -> int:
            """Docstring
            over lines.
            """

            # a comment
            value = """a string
            that is code"""

            class Inner:
                """Nested docstring."""

                def method(self) -> None:
                    pass

            return a  # trailing comment
        '''
    )
    assert function_lengths(source) == {"f": 6, "f.Inner.method": 1}
