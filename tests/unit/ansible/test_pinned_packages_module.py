"""The collection's modules (gpuboot.node.pinned_packages, kernel_module) run for real:
their own code, as Ansible runs it on a node, against fake dpkg-query, apt-get, dpkg,
modinfo and modprobe put first on PATH. The fakes keep the node's state in a JSON file,
record every argv, and answer as the real tools do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpuboot import paths
from tests.unit.ansible.modrun import run_module

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

MODULES = "ansible_collections.gpuboot.node.plugins.modules"
PIN_FILE = "gpuboot-cuda-toolkit"

# One fake for every tool: it logs its argv and acts on state.json.
FAKE = r"""
import json, os, sys
root = os.environ["FAKE_ROOT"]
tool = os.path.basename(sys.argv[0])
with open(os.path.join(root, "calls.jsonl"), "a") as fh:
    fh.write(json.dumps([tool] + sys.argv[1:]) + "\n")
path = os.path.join(root, "state.json")
state = json.load(open(path))
pkgs = state["packages"]
args = sys.argv[1:]
if tool == "dpkg-query":
    if "raw" in state:
        sys.stdout.write(state["raw"])
    for name, (version, status) in sorted(pkgs.items()):
        sys.stdout.write(f"{name}\t{version}\t{status}\n")
elif tool == "apt-get":
    verb = next(a for a in args if a in ("install", "remove"))
    for item in args[args.index(verb) + 1:]:
        if verb == "remove":
            pkgs.pop(item)
        else:
            name, version = item.split("=")
            pkgs[name] = [version, "ii "]  # apt drops the hold of what it changes
elif tool == "dpkg":
    assert args == ["--set-selections"], args
    for line in sys.stdin.read().splitlines():
        name, want = line.split()
        pkgs[name][1] = "h" + pkgs[name][1][1:]
elif tool == "modinfo":
    version = state["modinfo"].get(args[-1])
    if version is None:
        sys.stderr.write(f"modinfo: ERROR: Module {args[-1]} not found.\n")
        sys.exit(1)
    print(version)
elif tool == "modprobe":
    name = args[-1]
    mod = os.path.join(root, "sys", "module", name)
    if "-r" in args:
        os.remove(os.path.join(mod, "version"))
    else:
        os.makedirs(mod, exist_ok=True)
        open(os.path.join(mod, "version"), "w").write(state["modinfo"][name] + "\n")
json.dump(state, open(path, "w"))
"""
TOOLS = ("dpkg-query", "apt-get", "dpkg", "modinfo", "modprobe")

CONVERGED = {
    "cuda-toolkit-12-4": ["12.4.1-1", "hi "],
    "cuda-toolkit-12-2": ["12.2.2-1", "rc "],  # removed earlier, configuration left
    "openssh-server": ["1:9.2p1-2+deb12u3", "ii "],
}


class Node:
    def __init__(self, root: Path, packages: dict, **extra):
        self.root = root
        (root / "bin").mkdir()
        for tool in TOOLS:
            exe = root / "bin" / tool
            exe.write_text(f"#!{sys.executable}\n{FAKE}")
            exe.chmod(0o755)
        (root / "sys" / "module").mkdir(parents=True)
        self.state = {"packages": packages, **extra}
        (root / "state.json").write_text(json.dumps(self.state))

    def run(self, module: str, check: bool = False, **args) -> dict:
        return run_module(module, self.root, args, check=check, env={"FAKE_ROOT": str(self.root)})

    def pins(self, packages: list[str], check: bool = False, **args) -> dict:
        pin_file = str(self.root / PIN_FILE)
        return self.run(
            "pinned_packages", check=check, packages=packages, pin_file=pin_file, **args
        )

    def calls(self, tool: str | None = None) -> list[list[str]]:
        log = self.root / "calls.jsonl"
        lines = log.read_text().splitlines() if log.exists() else []
        return [c for c in map(json.loads, lines) if tool is None or c[0] == tool]

    def packages(self) -> dict:
        return json.loads((self.root / "state.json").read_text())["packages"]


@pytest.fixture
def node(tmp_path):
    return lambda packages, **extra: Node(tmp_path, json.loads(json.dumps(packages)), **extra)


def test_a_converged_node_changes_nothing_and_asks_apt_nothing(node):
    n = node(CONVERGED)
    first = n.pins(["cuda-toolkit-12-4=12.4.1-1"], supersede=["cuda-toolkit-[0-9]+-[0-9]+"])
    assert first["changed"] is True and first["pinned"] is True  # the pin file is new
    n.root.joinpath("calls.jsonl").unlink()
    again = n.pins(["cuda-toolkit-12-4=12.4.1-1"], supersede=["cuda-toolkit-[0-9]+-[0-9]+"])
    assert again["changed"] is False, again
    assert (again["installed"], again["removed"], again["held"]) == ([], [], [])
    assert n.calls() == [
        ["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\n"]
    ]


def test_a_missing_pin_is_installed_exactly_downgrade_allowed_and_held(node):
    n = node({**CONVERGED, "cuda-toolkit-12-4": ["12.4.2-1", "hi "]})  # a newer build, held
    result = n.pins(["cuda-toolkit-12-4=12.4.1-1"])
    assert result["changed"] is True and result["installed"] == ["cuda-toolkit-12-4=12.4.1-1"]
    assert n.calls("apt-get") == [
        [
            "apt-get", "-q", "-y", "-o", "DPkg::Lock::Timeout=120",
            "--no-install-recommends", "--allow-downgrades", "--allow-change-held-packages",
            "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold",
            "install", "cuda-toolkit-12-4=12.4.1-1",
        ]
    ]  # fmt: skip
    # apt dropped the hold of the package it changed: the module held it again
    assert n.packages()["cuda-toolkit-12-4"] == ["12.4.1-1", "hi "]
    assert result["held"] == ["cuda-toolkit-12-4"]
    prefs = (n.root / PIN_FILE).read_text()
    assert "Package: cuda-toolkit-12-4\nPin: version 12.4.1-1\nPin-Priority: 1000\n" in prefs


def test_a_superseded_release_is_removed_before_the_install(node):
    old = {"cuda-toolkit-12-2": ["12.2.2-1", "hi "], "openssh-server": ["1:9.2p1-2", "ii "]}
    n = node(old)
    result = n.pins(["cuda-toolkit-12-4=12.4.1-1"], supersede=["cuda-toolkit-[0-9]+-[0-9]+"])
    assert result["removed"] == ["cuda-toolkit-12-2"]
    verbs = [
        c[c.index("remove") if "remove" in c else c.index("install") :] for c in n.calls("apt-get")
    ]
    assert verbs == [["remove", "cuda-toolkit-12-2"], ["install", "cuda-toolkit-12-4=12.4.1-1"]]
    assert set(n.packages()) == {"cuda-toolkit-12-4", "openssh-server"}  # nothing else went


def test_a_released_hold_is_restored_without_apt(node):
    n = node({**CONVERGED, "cuda-toolkit-12-4": ["12.4.1-1", "ii "]})  # apt-mark unhold
    result = n.pins(["cuda-toolkit-12-4=12.4.1-1"])
    assert result["changed"] and result["held"] == ["cuda-toolkit-12-4"]
    assert n.calls("apt-get") == [] and n.calls("dpkg") == [["dpkg", "--set-selections"]]
    assert n.packages()["cuda-toolkit-12-4"] == ["12.4.1-1", "hi "]


def test_check_mode_says_what_would_change_with_a_diff_and_runs_nothing(node):
    old = {"cuda-toolkit-12-2": ["12.2.2-1", "hi "], "openssh-server": ["1:9.2p1-2", "ii "]}
    n = node(old)
    result = n.pins(
        ["cuda-toolkit-12-4=12.4.1-1"], check=True, supersede=["cuda-toolkit-[0-9]+-[0-9]+"]
    )
    assert result["changed"] is True
    assert result["installed"] == ["cuda-toolkit-12-4=12.4.1-1"]
    assert result["removed"] == ["cuda-toolkit-12-2"] and result["pinned"] is True
    assert [c[0] for c in n.calls()] == ["dpkg-query"]  # nothing but the one query
    assert n.packages() == old and not (n.root / PIN_FILE).exists()
    pin_diff, pkg_diff = result["diff"]
    assert pin_diff["before"] == "" and "Pin: version 12.4.1-1" in pin_diff["after"]
    assert pkg_diff["before"] == (
        "cuda-toolkit-12-4 (not installed)\ncuda-toolkit-12-2 12.2.2-1 (superseded)\n"
    )
    assert pkg_diff["after"] == "cuda-toolkit-12-4 12.4.1-1 held\n"


@pytest.mark.parametrize(
    "raw",
    [
        "cuda-toolkit-12-4\t12.4.1-1\n",  # truncated: the status field cut off
        "cuda-toolkit-12-4\t12.4.1-1\th",  # cut inside the status
        "<html>502 Bad Gateway</html>\n",
        "cuda-toolkit-12-4\t12.4.1-1\tzz \n",  # not a dpkg status
        "Cuda Toolkit\t12.4.1-1\tii \n",  # not a package name
    ],
)
def test_unreadable_dpkg_output_fails_the_task_never_ok(node, raw):
    n = node(CONVERGED, raw=raw)
    result = n.pins(["cuda-toolkit-12-4=12.4.1-1"])
    assert result.get("failed") is True and "dpkg-query" in result["msg"], result
    assert n.calls("apt-get") == [] and n.calls("dpkg") == []


def test_an_empty_package_list_fails(node):
    result = node({}).pins(["cuda-toolkit-12-4=12.4.1-1"])
    assert result.get("failed") is True and "no package" in result["msg"], result


def test_a_pin_without_an_exact_version_is_refused(node):
    result = node(CONVERGED).pins(["cuda-toolkit-12-4"])
    assert result.get("failed") is True and "name=version" in result["msg"], result


# ------------------------------------------------------------------ kernel_module
def kmod(n: Node, check: bool = False, **args) -> dict:
    return n.run("kernel_module", check=check, sysfs=str(n.root / "sys"), **args)


def loaded(n: Node, name: str, version: str) -> None:
    (n.root / "sys" / "module" / name).mkdir(parents=True)
    (n.root / "sys" / "module" / name / "version").write_text(version + "\n")


def test_kernel_module_loads_a_module_that_is_not_loaded(node):
    n = node({}, modinfo={"nvidia_fs": "2.20.5"})
    result = kmod(n, name="nvidia_fs")
    assert result["changed"] and not result["reboot_needed"]
    assert n.calls("modprobe") == [["modprobe", "nvidia_fs"]]
    assert kmod(n, name="nvidia_fs")["changed"] is False  # now loaded at its version


def test_kernel_module_another_version_loaded_records_a_reboot(node):
    n = node({}, modinfo={"nvidia": "570.133.20"})
    loaded(n, "nvidia", "550.54.15")
    marker = n.root / "reboot-required.gpuboot-nvidia-driver"
    result = kmod(n, name="nvidia", version="570.133.20", reboot_marker=str(marker))
    assert result["changed"] and result["reboot_needed"] and n.calls("modprobe") == []
    assert marker.read_text() == "nvidia 550.54.15 loaded, 570.133.20 installed\n"
    assert kmod(n, name="nvidia", reboot_marker=str(marker))["changed"] is False


def test_kernel_module_waits_for_the_driver_it_was_built_for(node):
    n = node({}, modinfo={"nvidia_peermem": "570.133.20", "nvidia": "570.133.20"})
    loaded(n, "nvidia", "550.54.15")  # the new driver runs only after a reboot
    marker = n.root / "marker"
    result = kmod(n, name="nvidia_peermem", requires="nvidia", reboot_marker=str(marker))
    assert result["reboot_needed"] and n.calls("modprobe") == []
    assert marker.read_text() == "nvidia_peermem not loaded, 570.133.20 installed\n"


@pytest.mark.parametrize(
    ("unloaded", "reboot", "modprobe"),
    [("load", False, [["modprobe", "mlx5_core"]]), ("reboot", True, []), ("nothing", False, [])],
)
def test_kernel_module_not_loaded_does_what_the_role_asks(node, unloaded, reboot, modprobe):
    # doca_ofed: openibd loads the RDMA modules, a module still missing needs a reboot;
    # the driver without nvidia_driver_load_module and fabric manager leave it alone
    n = node({}, modinfo={"mlx5_core": "24.10-1.1.4"})
    marker = n.root / "marker"
    result = kmod(n, name="mlx5_core", unloaded=unloaded, reboot_marker=str(marker))
    assert result["reboot_needed"] is reboot and n.calls("modprobe") == modprobe
    assert marker.exists() is reboot


def test_kernel_module_check_mode_loads_nothing(node):
    n = node({}, modinfo={"nvidia_fs": "2.20.5"})
    result = kmod(n, check=True, name="nvidia_fs", reboot_marker=str(n.root / "m"))
    assert result["changed"] is True and n.calls("modprobe") == []


def test_kernel_module_reloads_after_its_dependencies_changed(node):
    n = node({}, modinfo={"nvidia_peermem": "550.54.15", "nvidia": "550.54.15"})
    loaded(n, "nvidia", "550.54.15")
    loaded(n, "nvidia_peermem", "550.54.15")
    result = kmod(n, name="nvidia_peermem", requires="nvidia", reload=True)
    assert result["changed"] and not result["reboot_needed"]
    assert n.calls("modprobe") == [
        ["modprobe", "-r", "nvidia_peermem"],
        ["modprobe", "nvidia_peermem"],
    ]


# ---------------------------------------------------- through ansible-playbook
def test_ansible_finds_the_collection_and_ships_its_module_utils(tmp_path):
    """AnsiballZ must carry module_utils/dpkg.py to the node: one real play, check mode."""
    n = Node(tmp_path, json.loads(json.dumps(CONVERGED)))
    playbook = tmp_path / "play.yml"
    task = {
        "name": "Pins",
        "gpuboot.node.pinned_packages": {
            "packages": ["cuda-toolkit-12-4=12.4.1-1"],
            "pin_file": str(tmp_path / PIN_FILE),
        },
        "register": "out",
    }
    assert_task = {"ansible.builtin.assert": {"that": ["out.pinned", "out.installed == []"]}}
    play = {"hosts": "localhost", "gather_facts": False, "tasks": [task, assert_task]}
    playbook.write_text(yaml.safe_dump([play]))
    bin_dir = Path(sys.executable).parent
    proc = subprocess.run(
        [
            str(bin_dir / "ansible-playbook"),
            "--check",
            "-i",
            "localhost,",
            "-c",
            "local",
            str(playbook),
        ],
        capture_output=True,
        text=True,
        env={
            "PATH": f"{tmp_path / 'bin'}:{bin_dir}:/usr/bin:/bin",
            "ANSIBLE_COLLECTIONS_PATH": str(paths.COLLECTIONS_DIR),
            "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
            "ANSIBLE_LOCALHOST_WARNING": "False",
            "FAKE_ROOT": str(tmp_path),
            "HOME": str(tmp_path),
            **({"LANG": os.environ["LANG"]} if "LANG" in os.environ else {}),
        },
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "changed=1" in proc.stdout and [c[0] for c in n.calls()] == ["dpkg-query"]
