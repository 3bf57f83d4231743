"""`gpuboot lab ...` comes from the lab's entry point; without the lab the CLI says how to
get it (exit 2), and the product's CLI imports no lab module until a lab verb runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpuboot import cli

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier


def test_without_the_lab_the_verb_says_how_to_get_it(monkeypatch, capsys) -> None:
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **_kw: [])
    assert cli.main(["lab", "status", "--json"]) == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert err["message"] == "the lab is not installed: pip install 'gpuboot[lab]'"
    assert err["exit_code"] == 2


def test_lab_verbs_are_found_and_load_lazily() -> None:
    code = (
        "import sys; from gpuboot import cli; p = cli.build_parser();"
        "a = p.parse_args(['lab', 'down', '--name', 'x']);"
        "print(a.func.__module__, sorted(m for m in sys.modules if m.startswith('gpuboot_lab')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split(maxsplit=1)
    assert out[0] == "gpuboot_lab.cli"
    assert out[1].strip() == "['gpuboot_lab', 'gpuboot_lab.cli']"  # not lab, podman, repo
