"""scripts/check_imports.py (part of `make lint`): the product never imports the lab, the
emulator imports no gpuboot; and the tree as it is keeps that line."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
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
