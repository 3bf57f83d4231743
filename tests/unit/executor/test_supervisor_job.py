"""What the supervisor makes of a transmitted job's kwargs before its worker reads them: the
playbook one of its own shipped ones, gpuboot's Ansible settings with its own paths."""

from __future__ import annotations

import json

import pytest

from gpuboot import paths
from gpuboot.errors import BadInput
from gpuboot.executor import jobs
from gpuboot.executor.supervisor import job_kwargs
from tests.unit.executor.conftest import executor_tmp


@pytest.fixture
def job(tmp_path) -> jobs.Job:
    job = jobs.Job(tmp_path, "j1")
    job.dir.mkdir()
    return job


def _line(**kwargs) -> bytes:
    return json.dumps({"kwargs": kwargs}).encode()


def test_a_shipped_playbook_runs_with_the_executors_own_paths(job, tmp_path):
    temp = executor_tmp(tmp_path) / "t"  # the job's temp (named, not made, by job_kwargs)
    line = _line(
        playbook="install.yml",
        inventory="inventory/hosts.json",
        envvars={"ANSIBLE_ROLES_PATH": "/controller/roles", "KEEP": "1"},
        gpuboot={"strategy": "linear"},
    )
    kwargs = json.loads(job_kwargs(line, job, paths.PLAYBOOKS_DIR, temp))["kwargs"]
    assert kwargs["playbook"] == str(paths.PLAYBOOKS_DIR / "install.yml")
    env = kwargs["envvars"]
    assert env["ANSIBLE_ROLES_PATH"] == str(paths.ROLES_DIR)  # this executor's, not the sender's
    assert env["ANSIBLE_COLLECTIONS_PATH"] == str(paths.COLLECTIONS_DIR)
    # the job's own: in its directory, or in its short temp where that is too deep
    assert env["ANSIBLE_SSH_CONTROL_PATH_DIR"] in (str(job.dir / "run" / "cp"), str(temp / "cp"))
    assert env["KEEP"] == "1"
    assert "gpuboot" not in kwargs  # gpuboot's own key never reaches ansible-runner
    assert kwargs["inventory"] == "inventory/hosts.json"


def test_ansibles_local_temp_is_the_jobs_own_temp(job, tmp_path):
    line = _line(playbook="install.yml", envvars={"ANSIBLE_LOCAL_TEMP": "/controller/tmp"})
    kwargs = json.loads(job_kwargs(line, job, paths.PLAYBOOKS_DIR, tmp_path / "t"))["kwargs"]
    assert kwargs["envvars"]["ANSIBLE_LOCAL_TEMP"] == str(tmp_path / "t")


@pytest.mark.parametrize(
    "playbook", ["../install.yml", "/etc/passwd", "nope.yml", "install.yml/..", "x.sh"]
)
def test_anything_but_a_shipped_playbook_is_refused(job, playbook):
    with pytest.raises(BadInput, match="not one of this executor's shipped playbooks"):
        job_kwargs(_line(playbook=playbook), job, paths.PLAYBOOKS_DIR)


@pytest.mark.parametrize("line", [b"not json", b'{"zipfile": 10}', b'{"kwargs": {}}'])
def test_a_stream_that_does_not_start_with_a_job_is_refused(job, line):
    with pytest.raises(BadInput, match="not a job"):
        job_kwargs(line, job, paths.PLAYBOOKS_DIR)
