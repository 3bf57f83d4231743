"""Locate the real-capture fixtures (tests/fixtures/captures, copied from the shared corpus)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

CAPTURES = Path(__file__).resolve().parents[2] / "fixtures" / "captures"


@pytest.fixture(scope="session")
def captures() -> Path:
    assert CAPTURES.is_dir(), f"missing fixture dir {CAPTURES}"
    return CAPTURES


@pytest.fixture(scope="session")
def read(captures: Path) -> Callable[[str], str]:
    def _read(rel: str) -> str:
        return (captures / rel).read_text(encoding="utf-8")

    return _read


def capture_files(tool_dir: str) -> list[Path]:
    """Every capture of one tool, for parametrised 'parses every file' tests."""
    files = sorted((CAPTURES / tool_dir).iterdir())
    assert files, tool_dir
    return files
