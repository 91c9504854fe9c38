"""Reading a vertex function's source: dedented, parsed once per code object, lines kept for errors."""
from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from dataclasses import dataclass

from ..errors import CompileError, SourceLocation


@dataclass(frozen=True)
class Source:
    filename: str
    first_lineno: int  # line of the file where the parsed text starts
    indent: int  # columns removed by dedent
    lines: tuple[str, ...]  # the file's lines as written, for error messages
    tree: ast.FunctionDef

    def location(self, node: ast.AST) -> SourceLocation:
        lineno = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 0) + self.indent
        line = self.lines[lineno - 1] if 0 < lineno <= len(self.lines) else ""
        return SourceLocation(self.filename, self.first_lineno + lineno - 1, col, line.rstrip("\n"))

    def error(self, node: ast.AST, message: str) -> CompileError:
        return CompileError(message, self.location(node))


@functools.lru_cache(maxsize=512)
def _parse_code(code, fn_name: str, filename: str, text: str, first_lineno: int) -> Source:
    raw_lines = text.splitlines()
    indent = len(raw_lines[0]) - len(raw_lines[0].lstrip())
    module = ast.parse(textwrap.dedent(text))
    defs = [n for n in module.body if isinstance(n, ast.FunctionDef)]
    if not defs:
        raise CompileError(f"{fn_name} is not a `def` function; vertex programs must be written with def")
    return Source(filename, first_lineno, indent, tuple(raw_lines), defs[0])


def get_source(fn) -> Source:
    """Parse fn's source (lazily, once per code object). Decorators are kept out of the body."""
    code = getattr(fn, "__code__", None)
    if code is None:
        raise CompileError(f"{fn!r} is not a Python function")
    if code.co_name == "<lambda>":
        raise CompileError(f"{fn!r} is a lambda; write the vertex program with def")
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        raise CompileError(
            f"cannot read the source of {code.co_name} ({e}); vertex programs must be defined in a file"
        ) from None
    filename = inspect.getsourcefile(fn) or code.co_filename
    return _parse_code(code, code.co_name, filename, "".join(lines), first)
