"""The lab is its own distribution (lab/pyproject.toml, gpuboot-lab): it pins the product
release it is built with, and its package is the tree's gpuboot_lab, not a copy."""

from __future__ import annotations

import tomllib
from pathlib import Path

from tests.paths import REPO


def _project(pyproject: Path) -> dict:
    return tomllib.loads(pyproject.read_text())["project"]


def test_the_lab_pins_the_product_release_of_its_own_version() -> None:
    product, lab = _project(REPO / "pyproject.toml"), _project(REPO / "lab" / "pyproject.toml")
    assert lab["version"] == product["version"]
    assert lab["dependencies"] == [f"gpuboot=={product['version']}"]


def test_the_lab_distribution_builds_the_tree_s_gpuboot_lab() -> None:
    assert (REPO / "lab" / "gpuboot_lab").resolve() == (REPO / "gpuboot_lab").resolve()
