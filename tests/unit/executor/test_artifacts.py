"""The artifacts a worker returns are data: unpacked under the shard, without env."""

from __future__ import annotations

import io
import json
import zipfile

from gpuboot.executor.artifacts import unpack
from tests.unit.executor.conftest import artifacts_zip

SECRET = "GPUBOOT_SENTINEL_4f9c"


def test_command_keeps_the_command_and_drops_the_environment(tmp_path):
    command = {"command": ["ansible-playbook"], "cwd": "/x", "env": {"TOKEN": SECRET}}
    written = unpack(artifacts_zip({"command": json.dumps(command).encode(), "rc": b"0"}), tmp_path)
    assert sorted(written) == ["command", "rc"]
    assert json.loads((tmp_path / "command").read_text()) == {
        "command": ["ansible-playbook"],
        "cwd": "/x",
    }
    assert SECRET not in "".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file())


def test_members_leaving_the_target_and_links_are_not_written(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("../escaped", b"x")
        archive.writestr("/abs", b"x")
        link = zipfile.ZipInfo("facts")
        link.external_attr = (0o120777) << 16
        archive.writestr(link, "/etc")
        archive.writestr("job_events/1.json", b"{}")
    target = tmp_path / "artifacts"
    assert unpack(buf.getvalue(), target) == ["job_events/1.json"]
    assert not (tmp_path / "escaped").exists()
    assert not (target / "facts").exists()
