"""The operator's inventory is trusted only after it is checked.

Every hostile inventory under tests/fixtures/inventories/ is refused with exit 2 (one
line naming the file or host and key, the rule and a hint) by every verb, before any
host is touched or a run directory exists; a relative `-i` behaves like the absolute one.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuboot import cli
from gpuboot.errors import ConfigError
from gpuboot.inventory import load_inventory
from tests.paths import REPO

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

FIXTURES = REPO / "tests" / "fixtures" / "inventories"
HOSTILE = sorted(p for p in (FIXTURES / "hostile").iterdir() if p.is_dir())
VERBS = ("install", "plan", "certify", "scan")
GOOD_VARS = (
    "gpuboot_profile: hgx-h100-sxm-8gpu\n"
    'nvidia_driver_branch: "550"\n'
    'nvidia_driver_version: "550.54.15-1"\n'
)


def gpuboot(capsys, *argv) -> tuple[int, str]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().err


def inventory_arg(case: Path) -> Path:
    """A case holds inventory.yml, inventory.ini or an inventory directory inv/."""
    return next(
        p for p in (case / "inventory.yml", case / "inventory.ini", case / "inv") if p.exists()
    )


def write_site(root: Path, host_vars: str = "{ansible_host: 192.0.2.1}") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "group_vars").mkdir(exist_ok=True)
    (root / "group_vars" / "all.yml").write_text(GOOD_VARS + "ansible_port: 2222\n")
    site = root / "site.yml"
    site.write_text(f"all:\n  hosts:\n    node1: {host_vars}\n    node2: {host_vars}\n")
    return site


# ---------------------------------------------------------------- -i resolved once
def test_relative_inventory_is_resolved_once_to_the_same_hosts_and_vars(tmp_path, monkeypatch):
    site = write_site(tmp_path / "site")
    absolute = load_inventory(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    relative = load_inventory("../site/site.yml")
    assert relative.path == site and relative.path.is_absolute()
    assert relative.hosts == absolute.hosts
    assert relative.hosts["node1"]["ansible_port"] == 2222  # group_vars beside the file


def test_install_gives_the_runner_the_absolute_inventory(tmp_path, monkeypatch, capsys):
    """ansible-runner runs in its private data dir: a relative path would load nothing."""
    from gpuboot import install
    from gpuboot.runner import HostResult, PlayResult

    site = write_site(tmp_path / "site")
    specs = []

    def fake_run(spec, on_update=None, into=None):
        specs.append(spec)
        hosts = {h: HostResult(host=h, ok=1) for h in spec.limit.split(",")}
        return PlayResult(into[0], into[1], 0, "successful", 0.0, hosts)

    monkeypatch.setattr(install, "run", fake_run)
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / "runs"))
    monkeypatch.chdir(site.parent)
    code, err = gpuboot(capsys, "install", "-i", "site.yml", "-q")
    assert code == 0, err
    first = specs[0].inventory[0]
    assert first.is_absolute() and first == site
    # The runner's cwd is its private data dir: every source must resolve from there too.
    monkeypatch.chdir(tmp_path / "runs")
    assert all(Path(p).is_file() for p in specs[0].inventory)


# ---------------------------------------------------------------- the hostile corpus
@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("case", HOSTILE, ids=[p.name for p in HOSTILE])
def test_hostile_inventory_is_refused_by_every_verb(case, verb, guard, tmp_path, capsys):
    path = inventory_arg(case)
    code, err = gpuboot(capsys, verb, "-i", str(path))
    assert guard == [], f"{verb} reached a host: {guard}"
    assert code == 2, err
    # One error line, last (Ansible may have warned above it); never a traceback.
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and last.startswith("gpuboot: error: "), err
    for expect in (case / "EXPECT").read_text().splitlines():
        assert expect in last, (expect, err)
    assert "hint:" in last
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def _limited(seconds: int, megabytes: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (megabytes << 20, megabytes << 20))
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds))

    return apply


@pytest.mark.parametrize(
    ("bomb", "expect"),
    [
        ("billion-laughs.yml", "aliases"),
        ("recursive-alias.yml", "refers to itself"),
        # 5000 deep: PyYAML >= 6.0.4's libyaml scanner refuses it (its own 1,000-level cap)
        # before gpuboot's bound sees the 201st level; older ones leave it to gpuboot
        ("deep-nesting.yml", "nests deeper than|maximum nesting depth"),
        # 300 deep, under libyaml's cap: gpuboot's own bound refuses it on every version
        ("deep-300.yml", "nests deeper than 200 levels"),
    ],
)
def test_yaml_alias_bombs_are_refused_in_bounded_time_and_memory(tmp_path, bomb, expect):
    env = {**os.environ, "GPUBOOT_RUNS": str(tmp_path / "runs")}
    source = FIXTURES / "bombs" / bomb
    if bomb == "deep-300.yml":
        source = tmp_path / bomb
        source.write_text(
            "all:\n  vars:\n    gpuboot_profile: hgx-h100-sxm-8gpu\n"
            f"    deep: {'[' * 300}{']' * 300}\n"
        )
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "gpuboot.cli", "certify", "-i", str(source)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        preexec_fn=_limited(30, 1024),
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert re.search(expect, proc.stderr) and bomb in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert time.monotonic() - started < 20


# ---------------------------------------------------------------- what stays accepted
def test_usual_connection_settings_are_accepted(tmp_path):
    site = tmp_path / "site.yml"
    site.write_text(
        "all:\n  vars:\n"
        + "".join(f"    {line}\n" for line in GOOD_VARS.splitlines())
        + "    ansible_user: gpu-admin\n"
        "    ansible_become: true\n"
        "    ansible_become_password: not-on-any-command-line\n"
        "    ansible_ssh_private_key_file: ~/.ssh/gpu fleet key\n"
        "    ansible_ssh_common_args: >-\n"
        "      -o UserKnownHostsFile=/srv/lab/known_hosts -o StrictHostKeyChecking=yes\n"
        '      -o ProxyCommand="ssh -W %h:%p -q jump.example.internal"\n'
        "    gpuboot_allow_ssh_options: [ProxyCommand]\n"  # a local command: allowed by name
        "  hosts:\n"
        "    gpu-h100-001.dc1: {ansible_host: 10.0.0.5, ansible_port: '2222'}\n"
        "    gpu_h100_002: {ansible_host: 'fd00::12', ansible_port: 22}\n"
        "    gpu-h100-003: {ansible_host: node3.example.internal}\n"
    )
    inv = load_inventory(site)
    assert sorted(inv.hosts) == ["gpu-h100-001.dc1", "gpu-h100-003", "gpu_h100_002"]


@pytest.mark.parametrize(
    "name", ["a,b", "--foo", "-n", "../../x", "/abs", "a b", "x\ny", "x;y", "$(id)", "a*", "a:b"]
)
def test_host_names_outside_the_allowed_form_are_refused(tmp_path, name):
    import json

    site = tmp_path / "site.yml"
    site.write_text(
        "all:\n  vars: "
        + json.dumps(dict(line.split(": ", 1) for line in GOOD_VARS.replace('"', "").splitlines()))
        + f"\n  hosts:\n    {json.dumps(name)}: {{ansible_host: 192.0.2.1}}\n"
    )
    with pytest.raises(ConfigError) as err:
        load_inventory(site)
    assert repr(name) in str(err.value) and "host name" in err.value.message
    assert "letters" in (err.value.hint or "")


def test_a_host_named_like_a_group_is_refused(tmp_path):
    """A --limit or testinfra pattern naming it would select the whole group."""
    site = tmp_path / "site.yml"
    site.write_text(
        "all:\n  vars:\n"
        + "".join(f"    {line}\n" for line in GOOD_VARS.splitlines())
        + "  children:\n    gpu:\n      hosts:\n        node1: {}\n        gpu: {}\n"
    )
    with pytest.raises(ConfigError, match="also a group name"):
        load_inventory(site)


@pytest.mark.parametrize("where", ["inventory", "group_vars"])
def test_a_fifo_is_refused_not_read_forever(tmp_path, where):
    site = write_site(tmp_path / "site")
    fifo = site if where == "inventory" else site.parent / "group_vars" / "gpu.yml"
    if where == "inventory":
        site.unlink()
    os.mkfifo(fifo)
    env = {**os.environ, "GPUBOOT_RUNS": str(tmp_path / "runs")}
    proc = subprocess.run(
        [sys.executable, "-m", "gpuboot.cli", "plan", "-i", str(site)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "not a regular file" in proc.stderr and str(fifo) in proc.stderr


def test_an_oversized_file_is_refused_unread(tmp_path):
    site = write_site(tmp_path / "site")
    with open(site.parent / "group_vars" / "all.yml", "a") as fh:
        fh.write("# padding\n" * (1 << 20))  # 10 MiB of comments
    with pytest.raises(ConfigError, match="larger than 8 MiB"):
        load_inventory(site)


def test_a_directory_link_loop_is_walked_once(tmp_path):
    site = write_site(tmp_path / "inv")
    (site.parent / "loop").symlink_to(site.parent)
    (site.parent / "group_vars" / "gpu").mkdir()
    (site.parent / "group_vars" / "gpu" / "again").symlink_to(site.parent / "group_vars")
    assert sorted(load_inventory(site.parent).hosts) == ["node1", "node2"]


def test_ansible_yaml_tags_are_read_not_refused(tmp_path):
    """!unsafe marks a value Ansible must not template: valid YAML for Ansible."""
    site = write_site(tmp_path / "site", "{motd: !unsafe '{{ not a template }}'}")
    (site.parent / "host_vars").mkdir()
    (site.parent / "host_vars" / "node1.yml").write_text("banner: !unsafe '{{ nor this }}'\n")
    hosts = load_inventory(site).hosts
    assert str(hosts["node2"]["motd"]) == "{{ not a template }}"
    assert str(hosts["node1"]["banner"]) == "{{ nor this }}"


def test_an_ini_inventory_with_a_bare_branch_number_loads(tmp_path):
    """INI values are read as literals: `nvidia_driver_branch=550` is the number 550."""
    site = tmp_path / "hosts.ini"
    site.write_text(
        "[gpu]\nnode1 ansible_host=10.0.0.1\n[gpu:vars]\ngpuboot_profile=hgx-h100-sxm-8gpu\n"
        "nvidia_driver_branch=550\nnvidia_driver_version=550.54.15-1\n"
    )
    assert load_inventory(site).hosts["node1"]["nvidia_driver_branch"] == 550


def test_a_vars_link_into_proc_is_refused(tmp_path):
    site = write_site(tmp_path / "site")
    (site.parent / "host_vars").mkdir()
    (site.parent / "host_vars" / "node1.yml").symlink_to("/proc/self/environ")
    with pytest.raises(ConfigError, match="not a regular file") as err:
        load_inventory(site)
    assert err.value.where.endswith("host_vars/node1.yml")


def test_a_vars_link_to_the_root_is_not_walked(tmp_path):
    site = write_site(tmp_path / "site")
    (site.parent / "host_vars").mkdir()
    (site.parent / "host_vars" / "node1").symlink_to("/")
    env = {**os.environ, "GPUBOOT_RUNS": str(tmp_path / "runs")}
    proc = subprocess.run(
        [sys.executable, "-m", "gpuboot.cli", "plan", "-i", str(site)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        preexec_fn=_limited(30, 1024),
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "host_vars/node1/" in proc.stderr
