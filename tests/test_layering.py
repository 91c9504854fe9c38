"""The package's modules import only downwards (issue 40: layers that only look down):

    base, errors, config, compat, profiling <- ir <- frontend, passes <- codegen <- runtime, graph, _C
        <- compiler <- nn, dgl, the package itself

Every import a module makes, at its top or inside a function, is read from its source with ast: a
module may import its own level and those below, never one above, and two levels' modules never
import each other in a circle."""
from __future__ import annotations

import ast
from pathlib import Path

import seastar_layers

PACKAGE = Path(seastar_layers.__file__).parent
LEVELS = [("base", "errors", "config", "compat", "profiling"), ("ir",), ("frontend", "passes"), ("codegen",),
          ("runtime", "graph", "_C"), ("compiler",), ("nn", "dgl", "__init__")]
LEVEL = {part: rank for rank, parts in enumerate(LEVELS) for part in parts}


def modules() -> dict[str, Path]:
    """Each module's dotted name inside the package ("runtime.library") and its file."""
    return {".".join(path.relative_to(PACKAGE).with_suffix("").parts): path for path in PACKAGE.rglob("*.py")}


KNOWN = set(modules()) | {"_C"}


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules `name` imports, as dotted names inside the package ("__init__": the package's own
    names)."""
    package = name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                module = package[:len(package) - node.level + 1] + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "seastar_layers":
                module = node.module.split(".")[1:]
            else:
                continue
            for alias in node.names:  # `from . import config` imports a module, `from .x import f` a name of x
                candidate = ".".join([*module, alias.name])
                found.add(candidate if candidate in known else ".".join(module) or "__init__")
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".", 1)[1] for a in node.names if a.name.startswith("seastar_layers."))
    return found


def level(module: str) -> int:
    top = module.split(".")[0]
    assert top in LEVEL, f"{module}: place its top-level name {top!r} in LEVELS"
    return LEVEL[top]


def test_every_module_has_a_level():
    for name in modules():
        level(name)


def test_modules_import_only_downwards():
    upward = []
    for name, path in modules().items():
        for target in imported(name, path, KNOWN):
            if level(target) > level(name):
                upward.append(f"{name} (level {level(name)}) imports {target} (level {level(target)})")
    assert not upward, "\n".join(upward)


def test_no_circle_between_a_levels_parts():
    """Within a level, its parts (runtime and graph; frontend and passes) do not import each other both ways."""
    edges = set()
    for name, path in modules().items():
        for target in imported(name, path, KNOWN):
            a, b = name.split(".")[0], target.split(".")[0]
            if a != b and level(a) == level(b):
                edges.add((a, b))
    assert not {(a, b) for a, b in edges if (b, a) in edges}
