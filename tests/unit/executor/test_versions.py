"""A skewed executor is refused before any host, naming what differs and the fix."""

from __future__ import annotations

import json
import sys

import pytest

from gpuboot.errors import EXIT_BAD_INPUT, BadInput, RunError
from gpuboot.executor.stream import Executor
from gpuboot.executor.versions import check_executor, check_skew, local_versions

LOCAL = {"ansible-core": "2.19.14", "ansible-runner": "2.4.3", "gpuboot": "0.1.0"}


def test_same_versions_pass():
    check_skew("exec1", dict(LOCAL), LOCAL)


def test_skew_is_bad_input_naming_each_package_and_the_pip_command():
    remote = {**LOCAL, "ansible-core": "2.18.1", "gpuboot": "not installed"}
    with pytest.raises(BadInput) as err:
        check_skew("exec1", remote, LOCAL)
    assert err.value.exit_code == EXIT_BAD_INPUT
    assert "ansible-core 2.18.1 there, 2.19.14 here" in err.value.message
    assert "gpuboot not installed there" in err.value.message
    assert "ansible-runner" not in err.value.message
    assert err.value.where == "executor exec1"
    assert err.value.hint == (
        "on exec1, in gpuboot's venv: pip install "
        "'ansible-core==2.19.14' 'ansible-runner==2.4.3' 'gpuboot==0.1.0'"
    )


def test_local_versions_name_the_three_packages():
    assert set(local_versions()) == set(LOCAL)


@pytest.mark.subprocess
def test_the_supervisor_reports_the_controllers_own_versions():
    check_executor(Executor("local", (sys.executable, "-m", "gpuboot.executor.supervisor")))


@pytest.mark.subprocess
def test_a_skewed_executor_is_refused_by_what_it_reports():
    skewed = json.dumps({**local_versions(), "ansible-runner": "2.3.6"})
    executor = Executor("old", (sys.executable, "-c", f"print({skewed!r})"))
    with pytest.raises(BadInput, match=r"ansible-runner 2\.3\.6 there"):
        check_executor(executor)


@pytest.mark.subprocess
def test_an_executor_that_cannot_answer_is_a_harness_error_not_bad_input():
    executor = Executor("mute", (sys.executable, "-c", "import sys; sys.exit(255)"))
    with pytest.raises(RunError, match="exit 255"):
        check_executor(executor)
