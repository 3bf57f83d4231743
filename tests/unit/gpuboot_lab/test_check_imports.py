"""scripts/check_imports.py (part of `make lint`): the product never imports the lab, the
emulator imports no gpuboot; and the tree as it is keeps that line."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.paths import REPO

_spec = importlib.util.spec_from_file_location("check_imports", REPO / "scripts/check_imports.py")
assert _spec and _spec.loader
check_imports = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_imports)


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_tree_keeps_the_line() -> None:
    assert check_imports.violations() == []


def test_each_crossing_is_named(tmp_path: Path) -> None:
    _write(tmp_path, "gpuboot/ok.py", "import yaml\nfrom gpuboot import paths\nfrom . import x\n")
    _write(tmp_path, "gpuboot/cli.py", "def verb():\n    from gpuboot_lab.lab import up\n")
    _write(tmp_path, "gpuboot/dyn.py", "import importlib\nimportlib.import_module('gpuboot_lab')\n")
    _write(tmp_path, "gpuboot_lab/lab.py", "from gpuboot import paths\n")  # the lab may
    _write(tmp_path, "gpuboot_lab/emulator/emu/smi.py", "from emu import state\nimport gpuboot\n")
    _write(tmp_path, "gpuboot_lab/emulator/gpuemu", "from gpuboot_lab import lab\n")
    found = check_imports.violations(tmp_path)
    assert [line.split(": imports ")[0] for line in found] == [
        "gpuboot/cli.py:2",
        "gpuboot/dyn.py:2",
        "gpuboot_lab/emulator/emu/smi.py:2",
        "gpuboot_lab/emulator/gpuemu:1",
    ]
    assert "the product never imports the lab" in found[0]


def test_an_import_cycle_is_named_with_each_of_its_lines(tmp_path: Path) -> None:
    _write(tmp_path, "gpuboot/__init__.py", "")
    _write(tmp_path, "gpuboot/a.py", "from gpuboot import b\n")
    # hidden in a function, and through a package's module: still a cycle
    _write(tmp_path, "gpuboot/b.py", "def f():\n    from gpuboot.pkg.c import x\n")
    _write(tmp_path, "gpuboot/pkg/__init__.py", "from gpuboot.pkg.c import x\n")
    _write(tmp_path, "gpuboot/pkg/c.py", "from .. import a\nx = 1\n")
    _write(tmp_path, "gpuboot/d.py", "from gpuboot.pkg import c\nimport gpuboot.a\n")  # no cycle
    found = check_imports.violations(tmp_path)
    assert [line.split(" (import cycle")[0] for line in found] == [
        "gpuboot/a.py:1: imports gpuboot.b",
        "gpuboot/b.py:2: imports gpuboot.pkg.c",
        "gpuboot/pkg/c.py:1: imports gpuboot.a",
    ]
    assert all("gpuboot.a <-> gpuboot.b <-> gpuboot.pkg.c)" in line for line in found)


def test_rules_and_parsers_import_no_collection_nor_engine(tmp_path: Path) -> None:
    _write(tmp_path, "gpuboot/checks/ok.py", "from gpuboot.bundle.model import Evidence\n")
    _write(tmp_path, "gpuboot/checks/bad.py", "from gpuboot import engine\n")
    _write(tmp_path, "gpuboot/evidence/bad.py", "def f():\n    import gpuboot.collect\n")
    _write(tmp_path, "gpuboot/evidence/fine.py", "from gpuboot.collector_notes import x\n")
    _write(tmp_path, "gpuboot/checks/conftest.py", "from gpuboot.engine import run\n")  # harness
    found = check_imports.violations(tmp_path)
    assert found == [
        "gpuboot/checks/bad.py:1: imports gpuboot.engine (" + check_imports.WHY_PURE + ")",
        "gpuboot/evidence/bad.py:2: imports gpuboot.collect (" + check_imports.WHY_PURE + ")",
    ]
