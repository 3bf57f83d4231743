"""A hostile stack file: every schema fault in every section, and every compatibility
rule that can still be judged, is named at once -- by `matrix check` (text and --json) and
by install/plan, which refuse the file (exit 2) before any host is touched."""

from __future__ import annotations

import json
import operator
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuboot import matrix
from gpuboot.errors import ConfigError
from gpuboot.stacks import STACK_DIR, load_stack

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

# key -> (rule, words of the message): 6 schema faults over 4 sections, 2 broken rules
EXPECTED = {
    "driver.colour": ("schema", "unknown key 'colour'"),
    "driver.debian.version": ("schema", "must be a string"),
    "driver.redhat": ("CMP-006", "'nvidia-driver:999-open'"),  # a stream branch 550 has not
    "fabricmanager.version": ("CMP-001", "does not match driver 550.54.15"),
    "fabricmanager.redhat.depends": ("schema", "must be a list of strings"),
    "cuda.version": ("schema", "malformed value '12.4.one'"),
    "cuda.debian.flavour": ("schema", "unknown key 'flavour'"),
    "kernel.redhat.hold": ("schema", "unknown hold method 'yum-lock'"),
}
SCHEMA_KEYS = [k for k, (rule, _) in EXPECTED.items() if rule == "schema"]


def _hostile(data: dict[str, Any]) -> None:
    data["driver"]["colour"] = "blue"
    data["driver"]["debian"]["version"] = 550  # a YAML number, not a string
    data["driver"]["redhat"]["module_stream"] = "nvidia-driver:999-open"
    fm = data["fabricmanager"]
    fm["version"] = "550.54.14"  # consistent within the section, not with the driver
    fm["debian"]["version"] = fm["redhat"]["version"] = "550.54.14-1"
    fm["redhat"]["depends"] = "libnvidia-nscq-550"  # a string, not a list
    data["cuda"]["version"] = "12.4.one"
    data["cuda"]["debian"]["flavour"] = "vanilla"
    data["kernel"]["redhat"]["hold"] = "yum-lock"


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    data = yaml.safe_load((STACK_DIR / "lts-550-cuda12.4.yaml").read_text())
    _hostile(data)
    data["name"] = "hostile"
    path = tmp_path / "hostile.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def gpuboot(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuboot.cli", *args], capture_output=True, text=True, timeout=120
    )


def _key(where: str) -> str:
    return where.split(": ", 1)[1]


def test_matrix_check_names_every_fault_and_every_judgeable_rule(hostile):
    doc = matrix.check(str(hostile))
    found = {_key(v["where"]): v for v in doc["violations"]}
    for key, (rule, words) in EXPECTED.items():
        assert key in found, f"{key} not listed: {sorted(found)}"
        assert found[key]["rule"] == rule and words in found[key]["message"], found[key]
        assert found[key]["fix"], f"{key} has no fix"
        assert found[key]["where"] == f"{hostile}: {key}"
    # every schema fault once, and nothing else is invented
    assert sorted(k for k, v in found.items() if v["rule"] == "schema") == sorted(SCHEMA_KEYS)
    assert len(found) == len(doc["violations"])
    # the rules that need a faulty value are named as not judged, never guessed at
    assert doc["rules_checked"] is False
    assert {"CMP-010", "CMP-011"} <= set(doc["rules_not_checked"])
    assert "CMP-001" not in doc["rules_not_checked"]
    assert "CMP-006" not in doc["rules_not_checked"]


def test_cli_text_and_json_list_every_fault_exit_2(hostile):
    proc = gpuboot("matrix", "check", str(hostile), "--json")
    assert proc.returncode == 2, proc.stderr
    keys = {_key(v["where"]) for v in json.loads(proc.stdout)["violations"]}
    assert set(EXPECTED) <= keys
    text = gpuboot("matrix", "check", str(hostile))
    assert text.returncode == 2 and "Traceback" not in text.stderr
    for key, (rule, _) in EXPECTED.items():
        assert f"{rule} {hostile}: {key}:" in text.stdout, key
    assert "not judged" in text.stdout and "CMP-010" in text.stdout


def test_loading_the_stack_raises_naming_every_schema_fault(hostile):
    with pytest.raises(ConfigError) as err:
        load_stack(hostile)
    said = f"{err.value.where} {err.value.message} {err.value.hint}"
    for key in SCHEMA_KEYS:
        assert key in said, key
    assert str(hostile) in said and "6 schema faults in all" in err.value.message


@pytest.mark.parametrize("verb", ["install", "plan"])
def test_install_and_plan_refuse_the_file_exit_2_before_any_host(tmp_path, hostile, listener, verb):
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        f"all:\n  vars: {{gpuboot_profile: hgx-h100-sxm-8gpu, gpuboot_stack: '{hostile}'}}\n"
        f"  hosts:\n    n1: {{ansible_host: 127.0.0.1, ansible_port: "
        f"{listener.getsockname()[1]}}}\n"
    )
    proc = gpuboot(verb, "-i", str(inventory), "--json")
    assert proc.returncode == 2, proc.stderr
    error = json.loads(proc.stdout)["error"]
    for key in SCHEMA_KEYS:
        assert key in error["message"], (key, error)
    with pytest.raises(BlockingIOError):  # no connection was made
        listener.accept()


def test_a_clean_stack_still_reads_and_checks_clean():
    doc = matrix.check("lts-550-cuda12.4")
    assert doc["violations"] == [] and doc["rules_checked"] is True
    assert doc["rules_not_checked"] == []


def test_an_unread_value_refuses_every_use():
    from gpuboot.stacks.model import NotRead, Unread

    u = Unread("cuda.version")
    uses = [
        lambda: u == "12.4.1",
        lambda: operator.ne("12.4.1", u),  # the reflected comparison too
        lambda: bool(u),
        lambda: str(u),
        lambda: f"{u}",
        lambda: int(u),
        lambda: list(u),
        lambda: u.startswith("12"),
        lambda: {u},
        lambda: "12" in u,
        lambda: u < "13",
    ]
    for i, use in enumerate(uses):
        with pytest.raises(NotRead) as err:
            use()
        assert err.value.key == "cuda.version", i
