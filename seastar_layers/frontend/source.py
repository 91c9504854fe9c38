"""Reading a vertex function's source: dedented, parsed once per code object, lines kept for errors."""
from __future__ import annotations

import __future__
import ast
import functools
import inspect
import linecache
import operator
import textwrap
import types
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
    if not _compiles_to(text, code):
        raise CompileError(f"the source of {fn_name} in {filename} (line {first_lineno}) is not the code that is "
                           "running: the file was edited after it was imported. Compiling the new text would not "
                           "compute what the running function computes; re-import the module "
                           "(importlib.reload) or restart Python")
    return Source(filename, first_lineno, indent, tuple(raw_lines), defs[0])


_FUTURE_FLAGS = functools.reduce(operator.or_, (getattr(__future__, name).compiler_flag
                                                 for name in __future__.all_feature_names))


def _compiles_to(text: str, code: types.CodeType) -> bool:
    """Whether the function's source text (as inspect found it) compiles to the running code object.

    The text is compiled in the context that shapes its bytecode: inside a function that binds the
    code's free variables (so closure reads compile as they did), in a module that imports the names
    its file imports (the compiler loads attributes of imported names differently). Only what the
    code does is compared (bytecode, names, constants), not line numbers, so edits elsewhere in the
    file that leave this function alone pass."""
    try:
        # "if 1:" takes the text with its own indentation (dedenting would change multi-line strings)
        fn_def = ast.parse("if 1:\n" + text if text[:1].isspace() else text).body[0]
        fn_def = fn_def.body[0] if isinstance(fn_def, ast.If) else fn_def
        binds = [ast.Assign([ast.Name(name, ast.Store())], ast.Constant(None)) for name in code.co_freevars]
        wrapper = ast.FunctionDef("_seastar_source_check", ast.arguments([], [], None, [], [], None, []),
                                  [*binds, fn_def, ast.Return(ast.Constant(None))], [], None, None)
        imports = [ast.Import([ast.alias("_", name)]) for name in _imported_names(code.co_filename)]
        module = ast.fix_missing_locations(ast.Module([*imports, wrapper], []))
        outer = compile(module, code.co_filename, "exec", flags=code.co_flags & _FUTURE_FLAGS, dont_inherit=True)
    except (SyntaxError, ValueError, IndexError):
        return False
    wrapper_code = next(c for c in outer.co_consts if isinstance(c, types.CodeType))
    compiled = [c for c in wrapper_code.co_consts if isinstance(c, types.CodeType) and c.co_name == code.co_name]
    return len(compiled) == 1 and _behaviour(compiled[0]) == _behaviour(code)


def _imported_names(filename: str) -> set[str]:
    """Names bound by import statements in the module scope of a file, as it reads now."""
    try:
        tree = ast.parse("".join(linecache.getlines(filename)))
    except (SyntaxError, ValueError):
        return set()

    def module_scope(nodes):
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                yield from (a.asname or a.name.split(".")[0] for a in node.names if a.name != "*")
            elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                yield from module_scope(ast.iter_child_nodes(node))

    return set(module_scope(tree.body))


def _behaviour(code: types.CodeType) -> tuple:
    """What a code object does, without where its lines are."""
    consts = tuple(_behaviour(c) if isinstance(c, types.CodeType) else (type(c), c) for c in code.co_consts)
    return (code.co_code, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars, code.co_argcount,
            code.co_kwonlyargcount, consts)


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
