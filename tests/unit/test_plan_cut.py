"""`gpuboot plan` on an answer cut short: the package read (and the .run installer's listing
after it) end in the collection's trailer "<exit> <bytes>", so an answer cut anywhere, or
missing bytes, is ERROR for that node (not read), never packages "not installed" that plan
would install. The real query runs in a real shell over a real dpkg-query capture; only
the transport's answer is cut."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from testinfra.backend.base import CommandResult
from testinfra.backend.local import LocalBackend

from gpuboot import cli, plan, transport

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

DPKG = Path(__file__).parents[1] / "fixtures" / "captures" / "dpkg" / "dpkg-query_-W.converged.txt"
LISTING = DPKG.read_bytes()


class CutHost:
    """A node answering through a real shell; ``cut`` edits its stdout on the way back
    (a dropped ssh channel, a proxy), the exit status stays 0 as such a cut may leave it."""

    def __init__(self, tmp_path: Path, cut):
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        (bin_dir / "dpkg-query").write_text(f"#!/bin/sh\ncat {DPKG}\n")
        (bin_dir / "dpkg").write_text("#!/bin/sh\nexit 1\n")
        for tool in bin_dir.iterdir():
            tool.chmod(0o755)
        self.env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
        self.root, self.cut = tmp_path / "root", cut
        self.root.mkdir(exist_ok=True)
        self.backend = type("B", (), {"get_hostname": lambda _s: "n1", "NAME": "ssh"})()

    def run(self, command: str) -> CommandResult:
        argv = ["sh", "-c", command, "sh", str(self.root)]
        proc = subprocess.run(argv, capture_output=True, env=self.env, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return CommandResult(LocalBackend(), 0, command, self.cut(proc.stdout), proc.stderr)


def _plan(tmp_path, monkeypatch, capsys, cut) -> tuple[int, dict]:
    inv = tmp_path / "inv.yml"
    inv.write_text(
        "all:\n  vars: {gpuboot_stack: lts-550-cuda12.4, gpuboot_profile: hgx-h100-sxm-8gpu}\n"
        "  hosts:\n    n1: {ansible_host: 192.0.2.1}\n"
    )
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    host = CutHost(tmp_path, cut)
    monkeypatch.setattr(transport, "connect", lambda *_a: host)
    code = cli.main(["plan", "-i", str(inv), "--json"])
    (node,) = json.loads(capsys.readouterr().out)["nodes"]
    return code, node


def test_a_whole_answer_is_planned(tmp_path, monkeypatch, capsys):
    _, node = _plan(tmp_path, monkeypatch, capsys, lambda out: out)
    assert "error" not in node, node
    driver = [i for i in node["items"] if i["package"].startswith("nvidia-driver-550")]
    assert driver and driver[0]["current"] == "550.54.15-1"  # read, not "not installed"


@pytest.mark.parametrize(
    ("cut", "why"),
    [
        # the channel dropped inside dpkg-query's listing: the driver's line never came
        (lambda out: out[: LISTING.index(b"nvidia-driver-550")], "packages: truncated: no end"),
        # lines lost in the middle, the trailer intact: the count says so
        (
            lambda out: out.replace(b"nvidia-driver-550-open\t550.54.15-1\thi \n", b"", 1),
            "packages: truncated: ",
        ),
        # the package read whole, the .run installer's listing after it cut off
        (lambda out: out[: out.rindex(b"\n--gpuboot-end runfile ")], "runfile: truncated: no end"),
    ],
    ids=["inside-the-listing", "bytes-lost", "inside-the-runfile-listing"],
)
def test_a_cut_answer_is_an_error_never_a_package_to_install(
    tmp_path, monkeypatch, capsys, cut, why
):
    code, node = _plan(tmp_path, monkeypatch, capsys, cut)
    assert "items" not in node, node  # nothing would be installed on a guess
    assert node["error"].startswith("cannot read installed packages: " + why), node
    assert code == 1


def test_bytes_lost_say_how_many_came_of_how_many(tmp_path, monkeypatch, capsys):
    line = b"nvidia-driver-550-open\t550.54.15-1\thi \n"
    _, node = _plan(tmp_path, monkeypatch, capsys, lambda out: out.replace(line, b"", 1))
    assert f"{len(LISTING) - len(line)} bytes received of the {len(LISTING)}" in node["error"]


def test_the_read_is_one_command_with_a_trailer_for_each_part():
    # one round trip: the package read, then the .run listing, each with its trailer
    query = plan.with_runfile_read("dpkg-query -W")
    assert query.count("--gpuboot-end") == 2 and "mktemp" in query
