"""`gpuboot completion bash|zsh`: generated from the argparse tree, so it completes every
verb and option the parser has (never stale); exercised in a real bash."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuboot import cli
from gpuboot.completion import _subparsers

pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash"),
]


@pytest.fixture(scope="module")
def script(tmp_path_factory) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "gpuboot.cli", "completion", "bash"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    path = tmp_path_factory.mktemp("completion") / "gpuboot.bash"
    path.write_text(proc.stdout)
    return str(path)


def complete(script: str, *words: str) -> list[str]:
    """COMPREPLY for the command line ``words`` (the last one is being typed)."""
    quoted = " ".join(f"'{w}'" for w in words)
    proc = subprocess.run(
        [
            "bash",
            "-c",
            f"source {script}; COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; "
            '_gpuboot; echo "${COMPREPLY[@]}"',
        ],
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_verbs_complete(script):
    assert complete(script, "gpuboot", "certi") == ["certify"]
    assert sorted(complete(script, "gpuboot", "cer")) == ["cert", "certify"]
    assert set(complete(script, "gpuboot", "")) >= {"install", "certify", "scan", "runs", "help"}


def test_options_of_the_verb_complete(script):
    assert complete(script, "gpuboot", "install", "-i", "inv.yml", "--li") == ["--limit"]
    assert complete(script, "gpuboot", "runs", "prune", "--ol") == ["--older-than"]
    assert "--serial" not in complete(script, "gpuboot", "certify", "--s")


def test_choices_of_options_and_positionals_complete(script):
    assert complete(script, "gpuboot", "certify", "--probes", "") == ["none", "quick", "full"]
    assert complete(script, "gpuboot", "matrix", "ch") == ["check"]
    assert complete(script, "gpuboot", "completion", "") == ["bash", "zsh"]
    assert complete(script, "gpuboot", "cert", "") == ["keygen", "verify"]
    assert complete(script, "gpuboot", "cert", "verify", "--pu") == ["--pubkey"]


def test_every_verb_and_option_of_the_parser_is_in_the_script(script):
    text = Path(script).read_text()
    parser = cli.build_parser()
    for name, sub in _subparsers(parser).choices.items():
        assert f"/{name}" in text, name
        for opt in sub._option_string_actions:
            assert opt in text, (name, opt)


def test_zsh_wraps_the_same_function():
    proc = subprocess.run(
        [sys.executable, "-m", "gpuboot.cli", "completion", "zsh"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0
    assert "bashcompinit" in proc.stdout and "_gpuboot()" in proc.stdout
