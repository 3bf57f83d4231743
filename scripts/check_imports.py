#!/usr/bin/env python3
"""The product/lab line, checked on the source (stdlib ast, nothing imported):

- no module of the product (gpuboot/) imports the lab (gpuboot_lab) or the emulator (emu);
- the emulator (gpuboot_lab/emulator/, stdlib-only: it runs inside lab nodes) imports
  neither gpuboot nor gpuboot_lab.

An import written anywhere counts (inside a function, under TYPE_CHECKING, importlib
calls with a literal name). Exit 1 listing each offending line; 0 when the line holds.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EMULATOR = Path("gpuboot_lab/emulator")
# (tree, top-level packages it must not import, why)
RULES = (
    (Path("gpuboot"), {"gpuboot_lab", "emu"}, "the product never imports the lab"),
    (EMULATOR, {"gpuboot", "gpuboot_lab"}, "the emulator is stdlib-only and imports no gpuboot"),
)


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


def violations(root: Path = ROOT) -> list[str]:
    found = []
    for tree, banned, why in RULES:
        for path in _sources(root, tree):
            rel = path.relative_to(root)
            try:
                module = ast.parse(path.read_text(), filename=str(rel))
            except SyntaxError as exc:
                found.append(f"{rel}:{exc.lineno}: cannot parse: {exc.msg}")
                continue
            for node in ast.walk(module):
                for name in _imported(node):
                    if name.split(".")[0] in banned:
                        found.append(f"{rel}:{node.lineno}: imports {name} ({why})")
    return found


def main() -> int:
    found = violations()
    for line in found:
        print(line, file=sys.stderr)
    if found:
        print(f"check_imports: {len(found)} import(s) cross the product/lab line", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
