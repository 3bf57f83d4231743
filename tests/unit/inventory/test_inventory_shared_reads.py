"""A fleet's hosts name a few stacks and profiles: the inventory's load reads and checks
each once, not once per host, yet every host keeps its own view and every error still
names the host, the key and the fix."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuboot import profiles
from gpuboot.errors import ConfigError
from gpuboot.inventory import load_inventory
from gpuboot.stacks import STACK_DIR, check_stack, load_stack, model

H100, L40S, STACK = "hgx-h100-sxm-8gpu", "l40s-pcie-4gpu", "lts-550-cuda12.4"


@pytest.fixture
def stack_file(tmp_path: Path) -> Path:
    """A copy of a shipped stack in its own directory: no earlier load has read it."""
    path = tmp_path / "stacks" / f"{STACK}.yaml"
    path.parent.mkdir()
    path.write_text((STACK_DIR / f"{STACK}.yaml").read_text())
    return path


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """Every stack file the schema reader parses."""
    seen: list[str] = []
    real = model.read_capped_yaml

    def counted(path, *args, **kwargs):
        seen.append(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(model, "read_capped_yaml", counted)
    return seen


@pytest.fixture
def profile_loads(monkeypatch) -> list[Any]:
    """Every load_profile call (each one a deep copy of the profile, or a read)."""
    seen: list[Any] = []
    real = profiles.load_profile

    def counted(name):
        seen.append(name)
        return real(name)

    monkeypatch.setattr(profiles, "load_profile", counted)
    return seen


def write_inventory(tmp_path: Path, hosts: dict[str, dict[str, Any]]) -> Path:
    path = tmp_path / "inventory.yml"
    doc = {
        "all": {
            "hosts": {
                name: {"ansible_host": f"10.0.0.{i + 1}", **hostvars}
                for i, (name, hostvars) in enumerate(hosts.items())
            }
        }
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def fleet(n: int, stack: str | Path, profile: str = H100) -> dict[str, dict[str, Any]]:
    return {
        f"gpu{i:02d}": {"gpuboot_profile": profile, "gpuboot_stack": str(stack)} for i in range(n)
    }


def test_stack_file_is_parsed_once_for_every_host_naming_it(tmp_path, stack_file, reads):
    inv = load_inventory(write_inventory(tmp_path, fleet(6, stack_file)))
    assert reads == [str(stack_file)]
    assert len(inv.views) == 6
    assert {view.stack.name for view in inv.views.values()} == {STACK}


def test_each_distinct_profile_is_loaded_once_per_load(tmp_path, profile_loads):
    hosts = {**fleet(4, STACK), "pcie": {"gpuboot_profile": L40S, "gpuboot_stack": STACK}}
    hosts["pcie"]["gpuboot_stack"] = "prod-570-cuda12.8-pcie"
    inv = load_inventory(write_inventory(tmp_path, hosts))
    assert sorted(profile_loads) == [H100, L40S]
    assert inv.views["pcie"].profile["name"] == L40S
    assert inv.views["gpu03"].profile["name"] == H100


def test_an_unchanged_stack_file_is_not_read_again_by_the_next_load(tmp_path, stack_file, reads):
    path = write_inventory(tmp_path, fleet(3, stack_file))
    load_inventory(path)
    load_inventory(path)
    assert reads == [str(stack_file)]


def test_a_stack_file_edited_between_two_loads_is_read_again(tmp_path, stack_file, reads):
    path = write_inventory(tmp_path, fleet(3, stack_file))
    first = load_inventory(path).views["gpu00"].stack
    data = yaml.safe_load(stack_file.read_text())
    data["description"] = "edited between two loads"
    stack_file.write_text(yaml.safe_dump(data, sort_keys=False))
    st = stack_file.stat()
    os.utime(stack_file, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    second = load_inventory(path).views["gpu02"].stack
    assert reads == [str(stack_file)] * 2
    assert first.description != "edited between two loads"
    assert second.description == "edited between two loads"


def test_every_host_breaking_a_rule_is_still_named(tmp_path):
    """The same stack on the same profile breaks the same rules: each host naming the
    pair is reported with its own key, in inventory order, as when each was checked."""
    hosts = {
        "a": {"gpuboot_profile": H100, "gpuboot_stack": STACK},
        "b": {"gpuboot_profile": L40S, "gpuboot_stack": STACK},
        "c": {"gpuboot_profile": H100, "gpuboot_stack": STACK},
        "d": {"gpuboot_profile": L40S, "gpuboot_stack": STACK},
        "e": {"gpuboot_profile": L40S, "gpuboot_stack": STACK},
    }
    path = write_inventory(tmp_path, hosts)
    with pytest.raises(ConfigError) as err:
        load_inventory(path)
    message = err.value.message
    assert message.startswith("3 compatibility rule(s) broken: CMP-003 ")
    named = [f"{path}: {h}.gpuboot_stack: fabricmanager.enabled" for h in ("b", "d", "e")]
    assert [message.index(n) for n in named] == sorted(message.index(n) for n in named)
    assert f"{path}: a.gpuboot_stack" not in message
    assert err.value.where == str(path)
    (violation,) = check_stack(load_stack(STACK), profiles.load_profile(L40S))
    assert err.value.hint == violation.fix  # once, however many hosts break it


def test_a_broken_stack_named_by_many_hosts_is_refused_for_the_first(tmp_path, stack_file):
    data = yaml.safe_load(stack_file.read_text())
    data["driver"]["branch"] = "55x"
    stack_file.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        load_inventory(write_inventory(tmp_path, fleet(5, stack_file)))
    assert err.value.message == "malformed value '55x'"
    assert err.value.where == f"{tmp_path / 'inventory.yml'}: gpu00.gpuboot_stack"
    assert err.value.hint == "write it like '550'"


def test_a_host_after_a_good_one_naming_a_broken_stack_is_named(tmp_path, stack_file):
    data = yaml.safe_load(stack_file.read_text())
    data["driver"]["branch"] = "55x"
    stack_file.write_text(yaml.safe_dump(data))
    hosts = {
        "good": {"gpuboot_profile": H100, "gpuboot_stack": STACK},
        "bad": {"gpuboot_profile": H100, "gpuboot_stack": str(stack_file)},
    }
    with pytest.raises(ConfigError) as err:
        load_inventory(write_inventory(tmp_path, hosts))
    assert err.value.where.endswith(": bad.gpuboot_stack")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("gpuboot_profile", "nope", "unknown SKU profile 'nope'"),
        ("gpuboot_profile", [1], "unknown SKU profile '[1]'"),
        ("gpuboot_stack", "nope", "no stack named 'nope'"),
        ("gpuboot_stack", 5, "no stack named '5'"),
    ],
)
def test_a_name_that_does_not_load_is_refused_for_the_first_host(tmp_path, key, value, message):
    hosts = fleet(3, STACK)
    for hostvars in hosts.values():
        hostvars[key] = value
    path = write_inventory(tmp_path, hosts)
    with pytest.raises(ConfigError) as err:
        load_inventory(path)
    assert err.value.message == message
    assert err.value.where == f"{path}: gpu00.{key}"


def test_a_relative_profile_path_names_the_file_of_the_working_directory(tmp_path, monkeypatch):
    """Two sites' inventories each name ./profile.yaml, loaded one after the other in one
    process: each gets its own directory's profile, though the two files have the same
    size and time."""
    shipped = yaml.safe_load((profiles.PROFILE_DIR / f"{H100}.yaml").read_text())
    loaded = []
    for site in ("site-a", "site-b"):
        where = tmp_path / site
        where.mkdir()
        profile = where / "profile.yaml"
        profile.write_text(yaml.safe_dump({**shipped, "description": f"the {site} SKU"}))
        os.utime(profile, ns=(1_700_000_000_000_000_000,) * 2)
        monkeypatch.chdir(where)
        path = write_inventory(where, fleet(2, STACK, profile="./profile.yaml"))
        loaded.append(load_inventory(path).views["gpu01"].profile["description"])
    assert loaded == ["the site-a SKU", "the site-b SKU"]
