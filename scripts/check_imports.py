#!/usr/bin/env python3
"""The product's import lines, checked on the source (stdlib ast, nothing imported):

- no module of the product (gpuboot/) imports the lab (gpuboot_lab) or the emulator (emu);
- the emulator (gpuboot_lab/emulator/, stdlib-only: it runs inside lab nodes) imports
  neither gpuboot nor gpuboot_lab;
- the rules (gpuboot/checks/) and the parsers (gpuboot/evidence/) stay pure: they import
  neither collection nor the engine, so they judge a bundle offline exactly as certify does;
- no import cycle among the product's modules.

An import written anywhere counts (inside a function, under TYPE_CHECKING, importlib
calls with a literal name): a cycle hidden in a function is still a cycle of the design.
A module's edge goes to the module it names (``from pkg import mod`` to ``pkg.mod``), not
to the packages above it. Exit 1 listing each offending line; 0 when the lines hold.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = Path("gpuboot")
EMULATOR = Path("gpuboot_lab/emulator")
# (tree, top-level packages it must not import, why)
RULES = (
    (PRODUCT, {"gpuboot_lab", "emu"}, "the product never imports the lab"),
    (EMULATOR, {"gpuboot", "gpuboot_lab"}, "the emulator is stdlib-only and imports no gpuboot"),
)
# The pure layers, and the collection and engine modules they must not import.
PURE = (Path("gpuboot/checks"), Path("gpuboot/evidence"))
ENGINE = (
    "gpuboot.collect",
    "gpuboot.node_collect",
    "gpuboot.engine",
    "gpuboot.certify",
    "gpuboot.runner",
    "gpuboot.remote",
    "gpuboot.transport",
)
# pytest-testinfra's harness for the checks (molecule's verifier) collects a node's evidence
# on purpose: it lives beside the rules but is no rule.
PURE_HARNESS = {Path("gpuboot/checks/conftest.py")}
WHY_PURE = "rules and parsers import neither collection nor the engine"
_INSIDE_ENGINE = tuple(e + "." for e in ENGINE)


def _sources(root: Path, tree: Path) -> list[Path]:
    files = [p for p in (root / tree).rglob("*.py") if "__pycache__" not in p.parts]
    if tree == EMULATOR and (root / EMULATOR / "gpuemu").is_file():
        files.append(root / EMULATOR / "gpuemu")  # the launcher has no .py suffix
    return sorted(files)


def _imported(node: ast.AST) -> list[str]:
    """Dotted module names a node imports (relative imports stay inside their package)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        return [node.module] if node.module and not node.level else []
    if (  # importlib.import_module("x") / __import__("x")
        isinstance(node, ast.Call)
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
        and (
            (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
            or (isinstance(node.func, ast.Name) and node.func.id == "__import__")
        )
    ):
        return [node.args[0].value]
    return []


def _module_name(rel: Path) -> str:
    parts = list(rel.with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _parse(root: Path, path: Path, found: list[str]) -> ast.Module | None:
    rel = path.relative_to(root)
    try:
        return ast.parse(path.read_text(), filename=str(rel))
    except SyntaxError as exc:
        found.append(f"{rel}:{exc.lineno}: cannot parse: {exc.msg}")
        return None


def _targets(node: ast.AST, module: str, is_package: bool, known: set[str]) -> Iterator[str]:
    """The product modules an import node reaches: ``from a import b`` is ``a.b`` when that is
    a module, else ``a``; relative imports resolved from ``module``'s package."""
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            package = module if is_package else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{base}" if base else package
        for alias in node.names:
            if f"{base}.{alias.name}" in known:
                yield f"{base}.{alias.name}"
            elif base in known:
                yield base
        return
    for name in _imported(node):
        while name and name not in known:  # `import a.b.c` of a name inside a module
            name = name.rpartition(".")[0]
        if name:
            yield name


def _graph(root: Path, found: list[str]) -> dict[str, dict[str, tuple[Path, int]]]:
    """module -> {imported product module: (file, first line importing it)}."""
    files = {_module_name(p.relative_to(root)): p for p in _sources(root, PRODUCT)}
    known = set(files)
    graph: dict[str, dict[str, tuple[Path, int]]] = {}
    for module, path in files.items():
        edges = graph.setdefault(module, {})
        tree = _parse(root, path, found)
        for node in ast.walk(tree) if tree else ():
            for target in _targets(node, module, path.name == "__init__.py", known):
                if target != module:
                    line = min(edges.get(target, (path, node.lineno))[1], node.lineno)
                    edges[target] = (path.relative_to(root), line)
    return graph


def _cycles(graph: dict[str, dict[str, tuple[Path, int]]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return sorted(out)


def _cycle_lines(graph: dict[str, dict[str, tuple[Path, int]]]) -> list[str]:
    found = []
    for cycle in _cycles(graph):
        members = set(cycle)
        ring = " <-> ".join(cycle)
        for module in cycle:
            for target, (rel, line) in sorted(graph[module].items()):
                if target in members:
                    found.append(f"{rel}:{line}: imports {target} (import cycle: {ring})")
    return found


def _pure_lines(root: Path) -> list[str]:
    out = []
    for tree in PURE:
        for path in _sources(root, tree):
            rel = path.relative_to(root)
            module = _parse(root, path, []) if rel not in PURE_HARNESS else None
            for node in ast.walk(module) if module else ():
                names = _imported(node)
                if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names += [f"{node.module}.{a.name}" for a in node.names]
                hit = next((n for n in names if n in ENGINE or n.startswith(_INSIDE_ENGINE)), None)
                if hit:
                    out.append(f"{rel}:{node.lineno}: imports {hit} ({WHY_PURE})")
    return out


def violations(root: Path = ROOT) -> list[str]:
    found: list[str] = []
    for tree, banned, why in RULES:
        for path in _sources(root, tree):
            rel = path.relative_to(root)
            module = _parse(root, path, found)
            for node in ast.walk(module) if module else ():
                for name in _imported(node):
                    if name.split(".")[0] in banned:
                        found.append(f"{rel}:{node.lineno}: imports {name} ({why})")
    found += _pure_lines(root)
    found += _cycle_lines(_graph(root, []))
    return found


def main() -> int:
    found = violations()
    for line in found:
        print(line, file=sys.stderr)
    if found:
        print(f"check_imports: {len(found)} import line(s) break the rules above", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
