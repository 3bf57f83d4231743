"""The executor is reached by an argv: the inventory's host is ssh's destination after
``--``, never a word the remote shell or ssh's option parser reads."""

from __future__ import annotations

import pytest

from gpuboot.errors import BadInput
from gpuboot.executor.stream import Executor, ShardJob


def test_over_ssh_puts_the_host_after_the_end_of_options():
    ex = Executor.over_ssh("hall-a", "10.1.0.5")
    argv = ex.command("versions")
    assert argv[0] == "ssh" and "BatchMode=yes" in argv
    assert argv[argv.index("--") :] == ["--", "10.1.0.5", "gpuboot-executor-worker", "versions"]


@pytest.mark.parametrize("host", ["-oProxyCommand=sh", "a b", "exec\n1", ""])
def test_a_host_that_is_no_host_name_is_refused(host):
    with pytest.raises(BadInput, match="not a host name") as err:
        Executor.over_ssh("hall-a", host)
    assert err.value.where == "executor hall-a: ansible_host"


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("job_id", "../x", "job id"),
        ("on_detach", "ignore", "on_detach"),
        ("keepalive_s", 0, "keepalives"),
        ("heartbeat_s", 1, "heartbeat"),
    ],
)
def test_a_job_that_could_wait_for_ever_or_escape_is_refused(tmp_path, field, value, says):
    args = {"job_id": "j1", "private_data_dir": tmp_path, "runner_kwargs": {}, "hosts": ("h",)}
    with pytest.raises(BadInput, match=says):
        ShardJob(**{**args, "keepalive_s": 2, "heartbeat_s": 6, field: value})


@pytest.mark.subprocess
def test_a_channel_that_cannot_start_is_a_harness_error(tmp_path):
    from gpuboot.errors import RunError
    from gpuboot.executor.stream import run_shard

    job = ShardJob("j1", tmp_path, {}, ("h",), keepalive_s=1, heartbeat_s=3)
    with pytest.raises(RunError, match="cannot reach the executor"):
        run_shard(job, Executor("gone", (str(tmp_path / "no-ssh"),)), tmp_path / "s")
