"""`gpuboot plan` on EL8/EL9 names the driver's module stream: the real query line run by a
real shell against `rpm` and `dnf` stand-ins that print published/real captures."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from testinfra.backend.base import CommandResult
from testinfra.backend.local import LocalBackend

from gpuboot import plan, transport
from gpuboot.stacks import load_stack
from gpuboot.stacks.plan import stream_item

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

CAPTURES = Path(__file__).parents[2] / "fixtures" / "captures"
DNF = CAPTURES / "dnf"
FM_INSTALLED = DNF / "dnf_module_list_--enabled.fm-installed.dnf4.14-installroot.txt"
NO_PROFILE = DNF / "dnf_module_list_--enabled.dnf4.14-installroot.txt"
NONE_ENABLED = DNF / "dnf_module_list_nvidia-driver.no-repo.txt"
RHEL8_LATEST = DNF / "dnf_module_list_nvidia-driver.rhel8-latest-enabled.txt"
RPMS = CAPTURES / "rpm" / "rpm_-qa_--qf.rpm4.18-installroot.txt"
DPKG = CAPTURES / "dpkg" / "dpkg-query_-W.converged.txt"


@pytest.mark.parametrize(
    ("stack", "listing", "action", "current", "desired"),
    [
        ("lts-550-cuda12.4", FM_INSTALLED, "keep", "550-open/fm", "550-open/fm"),
        # the stream is enabled but the fm profile not installed: install records it
        ("lts-550-cuda12.4", NO_PROFILE, "switch", "550-open", "550-open/fm"),
        ("prod-570-cuda12.8", FM_INSTALLED, "switch", "550-open/fm", "570-open/fm"),
        ("prod-570-cuda12.8-pcie", NONE_ENABLED, "enable", None, "570-open"),
        ("prod-570-cuda12.8-pcie", RHEL8_LATEST, "switch", "latest", "570-open"),
    ],
)
def test_the_stream_item_on_real_listings(stack, listing, action, current, desired):
    item = stream_item(load_stack(stack), listing.read_text())
    assert (item.package, item.action, item.current, item.desired) == (
        "module nvidia-driver",
        action,
        current,
        desired,
    )
    assert item.reboot is False  # the branch's packages carry the reboot


def test_an_unreadable_listing_is_unknown_never_keep():
    lts = load_stack("lts-550-cuda12.4")
    failed = "Error: Failed to download metadata for repo 'cuda-rhel9'\n"
    cut = FM_INSTALLED.read_text().splitlines()[0] + "\n"  # the repository's name, no table
    cases = ((None, "Error: Cache-only enabled but no cache"), (failed, ""), (cut, ""))
    for listing, why in cases:
        item = stream_item(lts, listing, why)
        assert item.action == "unknown" and item.current.startswith("unread: "), item


def _fake_node(tmp_path: Path, rpm_rc: int, dnf: str) -> dict[str, str]:
    """`rpm` printing a real rpm 4.18 query (exit ``rpm_rc``); `dnf` running ``dnf``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "rpm").write_text(f"#!/bin/sh\ncat {RPMS}\nexit {rpm_rc}\n")
    (bin_dir / "dnf").write_text(f"#!/bin/sh\n{dnf}\n")
    (bin_dir / "dpkg-query").write_text(f"#!/bin/sh\ncat {DPKG}\n")
    for tool in ("rpm", "dnf", "dpkg-query"):
        (bin_dir / tool).chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin"}


class ShellHost:
    """A node whose commands run in a real shell with the stand-ins first on PATH."""

    def __init__(self, env: dict[str, str]):
        self.env = env
        self.backend = type("B", (), {"get_hostname": lambda _s: "el1", "NAME": "ssh"})()

    def run(self, command: str) -> CommandResult:
        proc = subprocess.run(["sh", "-c", command], capture_output=True, env=self.env)
        return CommandResult(LocalBackend(), proc.returncode, command, proc.stdout, proc.stderr)


def _plan(tmp_path, monkeypatch, rpm_rc: int, dnf: str, family: str = "redhat") -> dict:
    inv = tmp_path / "inv.yml"
    inv.write_text(
        f"all:\n  vars: {{gpuboot_stack: prod-570-cuda12.8, gpuboot_os_family: {family},\n"
        "    gpuboot_profile: hgx-h100-sxm-8gpu}\n"
        "  hosts:\n    el1: {ansible_host: 192.0.2.1}\n"
    )
    host = ShellHost(_fake_node(tmp_path, rpm_rc, dnf))
    monkeypatch.setattr(transport, "connect", lambda *_a: host)
    (node,) = plan.plan(str(inv))["nodes"]
    return node


def test_plan_reads_rpm_and_the_enabled_stream_in_one_round_trip(tmp_path, monkeypatch):
    node = _plan(tmp_path, monkeypatch, 0, f"cat {FM_INSTALLED}")
    (stream,) = [i for i in node["items"] if i["package"] == "module nvidia-driver"]
    assert (stream["current"], stream["desired"], stream["action"]) == (
        "550-open/fm",
        "570-open/fm",
        "switch",
    )
    assert node["items"][-1] is stream  # after the packages it enables
    assert {i["package"] for i in node["items"]} > {"nvidia-driver", "cuda-toolkit-12-8"}


def test_dnf_without_a_cache_leaves_the_packages_planned_and_the_stream_unknown(
    tmp_path, monkeypatch
):
    cold = "echo \"Error: Cache-only enabled but no cache for 'cuda-rhel9'\" >&2; exit 1"
    node = _plan(tmp_path, monkeypatch, 0, cold)
    (stream,) = [i for i in node["items"] if i["action"] == "unknown"]
    assert stream["current"] == "unread: Error: Cache-only enabled but no cache for 'cuda-rhel9'"
    assert len(node["items"]) > 1 and "error" not in node


def test_rpm_failing_is_the_nodes_error_even_when_dnf_answers(tmp_path, monkeypatch):
    node = _plan(tmp_path, monkeypatch, 1, f"cat {FM_INSTALLED}")
    assert node["error"].startswith("cannot read installed packages"), node


def test_a_debian_node_has_no_stream_in_its_plan(tmp_path, monkeypatch):
    node = _plan(tmp_path, monkeypatch, 0, "echo dnf must not run >&2; exit 9", "debian")
    assert "error" not in node and node["items"], node
    assert not [i for i in node["items"] if i["package"].startswith("module ")]
