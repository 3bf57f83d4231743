"""gpuboot.node.managed_file, run for real as Ansible runs it on a node: the whole file in
one module run (what the roles' copy and template tasks did in five round trips), with a
truthful changed in check mode, a diff, and a refusal of what it must not touch."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.unit.ansible.modrun import run_module

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

TEXT = "# Managed by gpuboot (role gpuboot_baseline).\nblacklist nouveau\n"


def managed(tmp_path: Path, check: bool = False, **args) -> dict:
    return run_module("managed_file", tmp_path, args, check=check)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_writes_a_new_file_whole_with_its_mode_and_diff(tmp_path):
    dest = tmp_path / "etc" / "modprobe.d" / "gpuboot.conf"
    result = managed(tmp_path, path=str(dest), content=TEXT)
    assert result["changed"] and not result.get("failed"), result
    assert dest.read_text() == TEXT and mode_of(dest) == 0o644
    assert result["diff"] == {
        "before_header": str(dest),
        "after_header": str(dest),
        "before": "",
        "after": TEXT,
    }
    assert [p.name for p in dest.parent.iterdir()] == ["gpuboot.conf"]  # no temp file left


def test_a_converged_file_is_not_changed(tmp_path):
    dest = tmp_path / "f.conf"
    managed(tmp_path, path=str(dest), content=TEXT)
    before = dest.stat().st_mtime_ns
    result = managed(tmp_path, path=str(dest), content=TEXT)
    assert result["changed"] is False and "diff" not in result, result
    assert dest.stat().st_mtime_ns == before


def test_check_mode_writes_nothing_and_says_what_would_change(tmp_path):
    dest = tmp_path / "f.conf"
    dest.write_text("old\n")
    result = managed(tmp_path, check=True, path=str(dest), content=TEXT)
    assert result["changed"] and result["diff"]["before"] == "old\n", result
    assert result["diff"]["after"] == TEXT
    assert dest.read_text() == "old\n"
    assert managed(tmp_path, check=True, path=str(tmp_path / "new"), content=TEXT)["changed"]
    assert not (tmp_path / "new").exists()


def test_mode_alone_differs_is_a_change_with_a_readable_diff(tmp_path):
    dest = tmp_path / "gpuboot-mig-apply"
    dest.write_text(TEXT)
    dest.chmod(0o644)
    result = managed(tmp_path, path=str(dest), content=TEXT, mode="0755")
    assert result["changed"], result
    assert mode_of(dest) == 0o755 and dest.read_text() == TEXT
    assert result["diff"]["before"] == "mode 0644\n"
    assert result["diff"]["after"].startswith("mode 0755")


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_a_file_another_user_owns_is_replaced_by_ours(tmp_path):
    dest = tmp_path / "f.conf"
    dest.write_text(TEXT)
    dest.chmod(0o644)
    os.chown(dest, 1000, 1000)
    assert managed(tmp_path, path=str(dest), content=TEXT)["changed"]
    assert (dest.stat().st_uid, dest.stat().st_gid) == (0, 0)


def test_bytes_that_are_not_utf8_are_replaced_not_a_crash(tmp_path):
    dest = tmp_path / "f.conf"
    dest.write_bytes(b"\xff\xfe garbage\n")
    result = managed(tmp_path, path=str(dest), content=TEXT)
    assert result["changed"] and not result.get("failed"), result
    assert dest.read_text() == TEXT


def test_a_huge_file_is_replaced_without_its_text_coming_back(tmp_path):
    dest = tmp_path / "f.conf"
    with dest.open("wb") as fh:  # 8 MiB a node put there: not read whole, not sent back
        fh.truncate(8 * 1024 * 1024)
    result = managed(tmp_path, path=str(dest), content=TEXT)
    assert result["changed"] and result["diff"]["before"].startswith("(over "), result
    assert len(json.dumps(result)) < 4096
    assert dest.read_text() == TEXT


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"path": "etc/relative.conf"}, "is not absolute"),
        ({"mode": "644x"}, "is not octal permissions"),
        ({"mode": "4755"}, "is not octal permissions"),  # no setuid from a role's argument
    ],
)
def test_bad_arguments_fail_and_write_nothing(tmp_path, args, message):
    args = {"path": str(tmp_path / "f.conf"), "content": TEXT, **args}
    result = managed(tmp_path, **args)
    assert result.get("failed") and message in result["msg"], result
    assert sorted(p.name for p in tmp_path.iterdir()) == ["args.json"]


def test_a_directory_at_the_path_is_refused_and_left(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "keep").write_text("x")
    result = managed(tmp_path, path=str(tmp_path / "d"), content=TEXT)
    assert result.get("failed") and "is a directory" in result["msg"], result
    assert (tmp_path / "d" / "keep").read_text() == "x"
