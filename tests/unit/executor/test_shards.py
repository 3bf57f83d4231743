"""Shards built on the controller and run at once on local executors (the supervisor as a
local command, hosts on ansible_connection=local: below gpuboot's inventory checks, which
refuse local connections for GPU hosts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuboot.executor import shards
from gpuboot.executor.stream import Executor
from tests.unit.executor.conftest import JOB_SECRET, PLAYS

KEY_TEXT_MARK = "OPENSSH PRIVATE KEY"


def _hosts(*names: str, **extra) -> dict[str, dict]:
    return {
        n: {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "group_names": ["gpu"],
            "inventory_dir": "/controller/inventories",
            **extra,
        }
        for n in names
    }


@pytest.fixture
def playbooks(tmp_path) -> Path:
    """The executor's playbooks (its shipped ones, in production)."""
    where = tmp_path / "playbooks"
    where.mkdir()
    for name, text in PLAYS.items():
        (where / name).write_text(text)
    return where


def _local(tmp_path: Path, name: str, playbooks: Path) -> Executor:
    return Executor(
        name,
        (sys.executable, "-m", "gpuboot.executor.supervisor",
         "--jobs-dir", str(tmp_path / f"jobs-{name}"), "--playbooks-dir", str(playbooks)),
    )  # fmt: skip


def _job(tmp_path: Path, executor: str, hosts: dict, play: str = "ok.yml", **kw):
    where = shards.shard_dir(tmp_path / "run", executor)
    return shards.build_job(
        where,
        hosts,
        play,
        {"job_secret": JOB_SECRET},
        runner={"settings": {"pexpect_timeout": 0.5}},
        final_task="done",
        keepalive_s=1,
        heartbeat_s=kw.pop("heartbeat_s", 10),
        **kw,
    )


def test_a_job_carries_only_the_shards_hosts_resolved_and_the_nodes_key(tmp_path):
    key = tmp_path / "node-key"
    key.write_text(f"-----BEGIN {KEY_TEXT_MARK}-----\nk\n")
    job = shards.build_job(
        tmp_path / "s", _hosts("h1", ansible_ssh_private_key_file=str(key)), "install.yml",
        {"gpuboot_allow_reboot": False}, final_task="done",
    )  # fmt: skip
    private = job.private_data_dir
    hosts = json.loads((private / "inventory" / "hosts.json").read_text())["all"]["hosts"]
    assert set(hosts) == {"h1"}
    assert "group_names" not in hosts["h1"] and "inventory_dir" not in hosts["h1"]
    assert "ansible_ssh_private_key_file" not in hosts["h1"]  # a path on the controller
    assert KEY_TEXT_MARK in (private / "env" / "ssh_key").read_text()
    assert (private / "env" / "ssh_key").stat().st_mode & 0o077 == 0
    assert json.loads((private / "env" / "extravars").read_text()) == {
        "gpuboot_allow_reboot": False
    }
    assert job.runner_kwargs["playbook"] == "install.yml"
    assert not (private / "project").exists()  # the play is not transmitted


def test_hosts_of_one_shard_with_two_keys_are_refused(tmp_path):
    from gpuboot.errors import BadInput

    hosts = {
        **_hosts("h1", ansible_ssh_private_key_file="/k/one"),
        **_hosts("h2", ansible_ssh_private_key_file="/k/two"),
    }
    with pytest.raises(BadInput, match="2 different ssh keys"):
        shards.build_job(tmp_path / "s", hosts, "install.yml", final_task="done")


@pytest.mark.parametrize("name", ["../install.yml", "/etc/x.yml", "", ".hidden.yml"])
def test_a_playbook_that_is_not_a_bare_name_is_refused(tmp_path, name):
    from gpuboot.errors import BadInput

    with pytest.raises(BadInput, match="bare name"):
        shards.build_job(tmp_path / "s", _hosts("h1"), name)


@pytest.mark.subprocess
def test_shards_run_at_once_each_journaled_and_no_secret_left_on_the_controller(
    tmp_path, playbooks
):
    key = tmp_path / "node-key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    jobs = [
        (_local(tmp_path, "ex-a", playbooks),
         _job(tmp_path, "ex-a", _hosts("h1", "h2", ansible_ssh_private_key_file=str(key)))),
        (_local(tmp_path, "ex-b", playbooks), _job(tmp_path, "ex-b", _hosts("h3"))),
    ]  # fmt: skip
    seen: list[tuple[str, str]] = []
    run_dir = tmp_path / "run"
    out = shards.run_shards(jobs, run_dir, lambda ex, ev: seen.append((ex, ev.get("event"))))
    assert {n: (o.state, o.hosts) for n, o in out.items()} == {
        "ex-a": ("complete", {"h1": "ok", "h2": "ok"}),
        "ex-b": ("complete", {"h3": "ok"}),
    }
    assert ("ex-a", "playbook_on_stats") in seen and ("ex-b", "playbook_on_stats") in seen
    for name, job in (("ex-a", jobs[0][1]), ("ex-b", jobs[1][1])):
        where = run_dir / "shards" / f"{name}-1"
        record = json.loads((where / "job.json").read_text())
        assert (record["executor"], record["job_id"]) == (name, job.job_id)
        assert json.loads((where / "outcome.json").read_text())["state"] == "complete"
        assert (where / "journal.jsonl").is_file()
        assert not job.private_data_dir.exists()  # removed once the shard ended
        assert not list((tmp_path / f"jobs-{name}").glob("*/stream"))  # released once read
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p != key]
    leaked = [p for p in written if KEY_TEXT_MARK in p.read_text(errors="replace")]
    assert leaked == []  # the key went in the stream only; no copy stays anywhere
    assert not any(JOB_SECRET in p.read_text(errors="replace") for p in run_dir.rglob("*.json"))
    # a second batch on the same executor gets a shard directory of its own
    again = shards.run_shards(
        [(_local(tmp_path, "ex-b", playbooks), _job(tmp_path, "ex-b", _hosts("h3")))], run_dir
    )
    assert again["ex-b"].state == "complete"
    assert (run_dir / "shards" / "ex-b-2" / "job.json").is_file()


@pytest.mark.subprocess
def test_a_playbook_the_executor_does_not_ship_is_refused_there(tmp_path, playbooks):
    job = _job(tmp_path, "ex-a", _hosts("h1"), play="elsewhere.yml")
    out = shards.run_shards([(_local(tmp_path, "ex-a", playbooks), job)], tmp_path / "run")
    assert out["ex-a"].state == "lost"
    assert "not one of this executor's shipped playbooks" in out["ex-a"].reason
    assert out["ex-a"].hosts == {"h1": "unknown"}


@pytest.mark.subprocess
def test_an_executor_that_cannot_start_makes_its_shard_lost_not_an_error(tmp_path, playbooks):
    gone = Executor("ex-gone", (str(tmp_path / "no-such-ssh"),))
    jobs = [
        (gone, _job(tmp_path, "ex-gone", _hosts("h9"))),
        (_local(tmp_path, "ex-a", playbooks), _job(tmp_path, "ex-a", _hosts("h1"))),
    ]
    out = shards.run_shards(jobs, tmp_path / "run")
    assert out["ex-gone"].state == "lost" and "cannot reach" in out["ex-gone"].reason
    assert out["ex-gone"].hosts == {"h9": "unknown"}
    assert out["ex-a"].hosts == {"h1": "ok"}  # the rest proceed
    assert not jobs[0][1].private_data_dir.exists()
