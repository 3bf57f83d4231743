"""`lab up` refuses, before it starts anything, nodes that fs.inotify.max_user_instances
cannot hold (each lab node's systemd, dbus and logind take 6 instances; past the limit a
new node's sshd never starts). /proc is a fake tree handed in as a parameter."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuboot.errors import EXIT_BAD_INPUT, BadInput
from gpuboot_lab import inotify, lab

ME, OTHER = 0, 1000


def fake_proc(root: Path, limit: int, processes: list[tuple[int, int, int]]) -> Path:
    """A /proc with ``limit`` and, per (uid, inotify fds, other fds), one process."""
    knob = root / "sys" / "fs" / "inotify" / "max_user_instances"
    knob.parent.mkdir(parents=True)
    knob.write_text(f"{limit}\n")
    (root / "self").mkdir()  # not a pid: skipped
    for pid, (uid, inotify_fds, other_fds) in enumerate(processes, start=100):
        fd = root / str(pid) / "fd"
        fd.mkdir(parents=True)
        (root / str(pid) / "status").write_text(
            f"Name:\tsystemd\nPid:\t{pid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
        )
        targets = ["anon_inode:inotify"] * inotify_fds + ["socket:[42]", "/dev/null"][:other_fds]
        for n, target in enumerate(targets):
            os.symlink(target, fd / str(n))
    return root


def lab_nodes(count: int) -> list[tuple[int, int, int]]:
    """The processes of ``count`` running lab nodes, as measured: systemd 4, dbus 1, logind 1."""
    return [(ME, 4, 2), (ME, 1, 1), (ME, 1, 2), (ME, 0, 2)] * count


def test_usage_counts_only_our_inotify_fds(tmp_path):
    proc = fake_proc(tmp_path, 128, [*lab_nodes(3), (OTHER, 7, 2), (ME, 0, 2)])
    assert inotify.usage(proc, uid=ME) == (128, 18)
    assert inotify.usage(proc, uid=OTHER) == (128, 7)


def test_nodes_that_fit_pass(tmp_path):
    proc = fake_proc(tmp_path, 128, lab_nodes(10))  # 60 held: 68 left, 11 nodes
    inotify.require_room(11, proc, uid=ME)


def test_nodes_that_do_not_fit_are_refused_naming_the_limit_the_room_and_the_fix(tmp_path):
    proc = fake_proc(tmp_path, 128, lab_nodes(10))
    with pytest.raises(BadInput) as caught:
        inotify.require_room(12, proc, uid=ME)
    error = caught.value
    assert error.exit_code == EXIT_BAD_INPUT
    assert "fs.inotify.max_user_instances = 128" in error.message
    assert "60 inotify instances are held" in error.message
    assert "so 11 more node(s) fit" in error.message
    assert "`sysctl -w fs.inotify.max_user_instances=1024`" in error.hint


def test_a_full_machine_fits_no_node_and_a_raised_limit_suggests_more(tmp_path):
    proc = fake_proc(tmp_path, 1024, [(ME, 1026, 0)])  # over the limit already
    with pytest.raises(BadInput) as caught:
        inotify.require_room(1, proc, uid=ME)
    assert "so 0 more node(s) fit" in caught.value.message
    assert "max_user_instances=2048" in caught.value.hint


def test_lab_up_refuses_before_creating_anything(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("GPUBOOT_HOME", str(home))

    def past_the_preflight():
        raise AssertionError("lab up went on to build the node image")

    monkeypatch.setattr("gpuboot_lab.image.ensure_image", past_the_preflight)
    proc = fake_proc(tmp_path / "proc", 128, lab_nodes(19))  # 114 held: 2 nodes fit
    with pytest.raises(BadInput, match="max_user_instances = 128"):
        lab.up("full", 3, "hgx-h100-sxm-8gpu", proc=proc)
    assert not (home / "labs" / "full").exists()
    assert lab.names() == []


def test_the_real_proc_gives_the_kernels_limit():
    limit, _held = inotify.usage()
    assert limit == int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())
