"""A driver installed outside packages (NVIDIA's .run installer) blocks a node in `gpuboot
plan`: the real query run by a real shell over the files the emulator's runfile-driver
fault leaves, the node named with the installer's version and the way out (a complete
command), plan exit 1; `nvidia-installer --uninstall` clears it; a file a package owns is
no such driver."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from testinfra.backend.base import CommandResult
from testinfra.backend.local import LocalBackend

from gpuboot import cli, plan, transport
from tests.unit.gpuboot_lab._emu import make_node

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

FIXTURES = Path(__file__).parents[1] / "fixtures"
DPKG = FIXTURES / "captures" / "dpkg" / "dpkg-query_-W.converged.txt"
LOG_HEAD = FIXTURES / "runfile" / "nvidia-installer.log.390.12.head.txt"


def _tools(tmp_path: Path, dpkg_owns: bool) -> dict[str, str]:
    """dpkg-query printing a real listing; dpkg -S owning every file or none."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "dpkg-query").write_text(f"#!/bin/sh\ncat {DPKG}\n")
    (bin_dir / "dpkg").write_text(f"#!/bin/sh\nexit {0 if dpkg_owns else 1}\n")
    (bin_dir / "rpm").write_text("#!/bin/sh\nexit 127\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin"}


class ShellHost:
    """A node whose root is ``root``: the command runs in a real shell, ``root`` its $1."""

    def __init__(self, root: Path, env: dict[str, str]):
        self.root, self.env = root, env
        self.backend = type("B", (), {"get_hostname": lambda _s: "n1", "NAME": "ssh"})()

    def run(self, command: str) -> CommandResult:
        argv = ["sh", "-c", command, "sh", str(self.root)]
        proc = subprocess.run(argv, capture_output=True, env=self.env, timeout=60)
        return CommandResult(LocalBackend(), proc.returncode, command, proc.stdout, proc.stderr)


def _plan(tmp_path, monkeypatch, root: Path, dpkg_owns: bool = False) -> tuple[int, dict]:
    inv = tmp_path / "inv.yml"
    inv.write_text(
        "all:\n  vars: {gpuboot_stack: lts-550-cuda12.4, gpuboot_profile: hgx-h100-sxm-8gpu}\n"
        "  hosts:\n    n1: {ansible_host: 192.0.2.1}\n"
    )
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    host = ShellHost(root, _tools(tmp_path, dpkg_owns))
    monkeypatch.setattr(transport, "connect", lambda *_a: host)
    code = cli.main(["plan", "-i", str(inv), "--json"])
    return code, inv


def test_the_emulated_runfile_driver_blocks_the_node_with_the_way_out(
    tmp_path, monkeypatch, capsys
):
    node = make_node(tmp_path, driver=False)
    node.run("ctl", "fault", "add", "runfile-driver", "535.161.08", check=True)
    code, inv = _plan(tmp_path, monkeypatch, node.root)
    doc = json.loads(capsys.readouterr().out)
    (n1,) = doc["nodes"]
    assert n1["outside_packages"] == {
        "files": [
            "/usr/bin/nvidia-installer",
            "/lib/modules/gpuemu/kernel/drivers/video/nvidia.ko",
        ],
        "driver": "535.161.08",
    }
    (group,) = doc["groups"]
    assert group["fix"] == (
        "on n1: `nvidia-installer --uninstall` (NVIDIA's removal of a .run install), reboot, "
        f"then `gpuboot install -i {inv} --limit n1`"
    )
    assert code == 1  # install would refuse this node
    assert n1["items"]  # what the stack would change is still shown
    text = plan.render(doc)
    assert "n1: BLOCKED an NVIDIA driver 535.161.08 installed outside packages" in text
    assert "1 blocked by a driver installed outside packages" in text

    # the documented way out, as the node's own nvidia-installer does it
    subprocess.run(
        [str(node.root / "usr/bin/nvidia-installer"), "--uninstall", "--silent"],
        env=node.env,
        check=True,
        timeout=60,
    )
    assert not node.exists("/usr/bin/nvidia-installer")
    assert node.status()["faults"] == []
    code, _ = _plan(tmp_path, monkeypatch, node.root)
    (n1,) = json.loads(capsys.readouterr().out)["nodes"]
    assert "outside_packages" not in n1 and code == 0, n1


def test_files_a_package_owns_are_no_runfile_driver(tmp_path, monkeypatch, capsys):
    node = make_node(tmp_path, driver=False)
    node.run("ctl", "fault", "add", "runfile-driver", check=True)
    code, _ = _plan(tmp_path, monkeypatch, node.root, dpkg_owns=True)
    (n1,) = json.loads(capsys.readouterr().out)["nodes"]
    assert "outside_packages" not in n1 and code == 0, n1


def test_the_version_comes_from_a_real_installer_log_and_the_log_alone_blocks_nothing(
    tmp_path, monkeypatch, capsys
):
    root = tmp_path / "root"
    (root / "var/log").mkdir(parents=True)
    (root / "var/log/nvidia-installer.log").write_text(LOG_HEAD.read_text())
    code, _ = _plan(tmp_path, monkeypatch, root)
    (n1,) = json.loads(capsys.readouterr().out)["nodes"]
    assert "outside_packages" not in n1 and code == 0  # left by an uninstalled driver
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/nvidia-installer").write_text("#!/bin/sh\n")
    code, _ = _plan(tmp_path, monkeypatch, root)
    (n1,) = json.loads(capsys.readouterr().out)["nodes"]
    assert n1["outside_packages"] == {"files": ["/usr/bin/nvidia-installer"], "driver": "390.12"}


def test_a_listing_is_read_within_bounds():
    hostile = "unowned relative/path\ninstaller-version $(reboot)\n" + "unowned /x\n" * 500
    found = plan.parse_runfile(hostile)
    assert found["driver"] is None and len(found["files"]) < 100
    assert plan.parse_runfile("") is None


def test_install_refuses_with_the_same_script_and_names_the_way_out(tmp_path):
    import yaml

    from gpuboot import paths
    from gpuboot.runner import _reason

    play = yaml.safe_load((paths.PLAYBOOKS_DIR / "install.yml").read_text())[0]
    (task,) = [t for t in play["pre_tasks"] if t["name"].startswith("INST-008 ")]
    assert task["ansible.builtin.command"]["argv"][2] == (
        "{{ lookup('ansible.builtin.file', 'runfile-driver.sh') }}"
    )
    assert paths.PLAYBOOKS_DIR / "files" / "runfile-driver.sh" == plan.RUNFILE_SCRIPT
    assert "'unowned ' in __gpuboot_runfile.stdout" in task["failed_when"]
    assert task["tags"] == ["always"]  # a remediation's --tags installs too
    node = make_node(tmp_path, driver=False)
    node.run("ctl", "fault", "add", "runfile-driver", check=True)
    script = plan.RUNFILE_SCRIPT.read_text()
    proc = subprocess.run(
        ["sh", "-c", script, "sh", str(node.root)],  # as the task runs it, in the node's root
        capture_output=True,
        text=True,
        env=_tools(tmp_path, dpkg_owns=False),
        timeout=60,
    )
    assert proc.returncode == 0 and "unowned /usr/bin/nvidia-installer" in proc.stdout
    # what the install's failed host says (gpuboot.runner's reason for the task)
    reason = _reason({"stdout": proc.stdout, "stderr": proc.stderr, "msg": ""})
    assert reason.startswith("an NVIDIA driver 550.54.15 is installed outside packages")
    assert "run `nvidia-installer --uninstall` on the node, reboot, then gpuboot install" in reason
