"""The package's modules import each other one way: no cycles, not even for type checking.

A cycle makes the import order matter (the module imported first sees the
other half-built) and hides which concept depends on which. The graph is read
from the source with :mod:`ast`: every ``import`` at module level, including
those under ``if TYPE_CHECKING:``; imports inside functions are deliberate
late imports and are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import contextengine

PACKAGE = Path(contextengine.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level_imports(
    tree: ast.Module, module: str, is_package: bool, *, typing_too: bool
) -> set[str]:
    found: set[str] = set()
    nodes: list[ast.stmt] = list(tree.body)
    while nodes:
        node = nodes.pop()
        if isinstance(node, ast.If) and _is_type_checking(node) and not typing_too:
            nodes.extend(node.orelse)
        elif isinstance(node, ast.If | ast.Try):
            nodes.extend(node.body)
            nodes.extend(node.orelse)
            if isinstance(node, ast.Try):
                for handler in node.handlers:
                    nodes.extend(handler.body)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("contextengine")}


def _graph(*, typing_too: bool = True) -> dict[str, set[str]]:
    files = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = _top_level_imports(
            tree, module, path.name == "__init__.py", typing_too=typing_too
        )
        # Importing a package's submodule runs the package first: an edge to the package
        # itself would make every submodule that re-exports look cyclic, so edges go to
        # modules only (``from pkg import name`` counts as an edge to pkg.name when that
        # is a module, else to pkg).
        graph[module] = {name for name in imported if name in files and name != module}
    return graph


def _cycle_through(graph: dict[str, set[str]], start: str) -> list[str] | None:
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        for target in graph.get(node, ()):
            if target == start:
                return [*path, start]
            if target not in seen and not start.startswith(target + "."):
                seen.add(target)
                stack.append((target, [*path, target]))
    return None


def test_the_summariser_modules_depend_one_way() -> None:
    graph = _graph()
    assert "contextengine.summarizers" not in graph["contextengine.openai_summarizer"]
    assert "contextengine.openai_summarizer" in graph["contextengine.summarizers"]
    assert _cycle_through(graph, "contextengine.summarizers") is None
    assert _cycle_through(graph, "contextengine.openai_summarizer") is None


def test_no_module_is_part_of_a_runtime_import_cycle() -> None:
    # Imports only for type checking are left out here: the stores' bulk helpers
    # name their store class in annotations (a cycle mypy resolves, Python never runs).
    graph = _graph(typing_too=False)
    # A package's __init__ re-exports its submodules, which import their siblings
    # through the package path: those edges point down, not around, so packages
    # are left out as starting points.
    cycles = {
        module: cycle
        for module in graph
        if not (PACKAGE / Path(*module.split(".")[1:]) / "__init__.py").is_file()
        and (cycle := _cycle_through(graph, module)) is not None
    }
    assert cycles == {}
