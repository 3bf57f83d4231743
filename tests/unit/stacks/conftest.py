"""Shared helpers for the stack tests: fixture stacks, profiles, writing variants."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuboot.profiles import load_profile
from gpuboot.stacks import STACK_DIR

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="session")
def profile() -> Callable[[str], dict[str, Any]]:
    cache: dict[str, dict[str, Any]] = {}

    def get(name: str) -> dict[str, Any]:
        if name not in cache:
            cache[name] = load_profile(name)
        return cache[name]

    return get


@pytest.fixture
def variant(tmp_path: Path) -> Callable[..., Path]:
    """Write a shipped stack, changed by ``edit(data)``, as ``<tmp>/<name>.yaml``."""

    def write(base: str, edit: Callable[[dict[str, Any]], None], name: str | None = None) -> Path:
        data = yaml.safe_load((STACK_DIR / f"{base}.yaml").read_text())
        edit(data)
        # the file is named after the stack unless a test wants them to differ
        path = tmp_path / f"{name or data['name']}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write
