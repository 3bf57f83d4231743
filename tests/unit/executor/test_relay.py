"""A host's answer as an executor relays it (gpuboot.executor.relay): the command's own
stdout and exit code once its manifest checks; cut or altered on the way, too large, timed
out or unreachable, it is the error a direct read gives, never an answer."""

from __future__ import annotations

import hashlib

import pytest

from gpuboot.executor import relay
from gpuboot.executor.collect_job import AnswerCorrupted
from gpuboot.node_collect import HostUnreachable
from gpuboot.remote import AnswerTooLarge, RemoteTimeout

CMD = relay.Command({}, "dpkg-query -W", 120, "reading installed packages", 64)


def _wrapped(body: str, rc: int = 0, before: str = "") -> str:
    digest = hashlib.sha256(body.encode()).hexdigest()
    end = f"gpuboot-collect-end {rc} {len(body.encode())} {digest}"
    return f"{before}gpuboot-collect-begin\n{body}\n{end}\n"


def _event(kind: str = "runner_on_ok", **res) -> dict:
    return {"event": kind, "event_data": {"host": "n1", "res": res}}


def test_a_whole_answer_is_the_commands_stdout_exit_and_stderr():
    answer = relay._answer("n1", _event(stdout=_wrapped("a\tb\n", 3, "oops\n")), CMD, "ex-a")
    assert answer == relay.Answer(3, "a\tb\n", "oops\n")
    on_tty = _wrapped("a\n", 0, "oops\n").replace("\n", "\r\n")
    assert relay._answer("n1", _event(stdout=on_tty, stderr=""), CMD, "ex-a") == relay.Answer(
        0, "a\n", "oops\n"
    )


@pytest.mark.parametrize(
    ("event", "error", "said"),
    [
        (_event(stdout=_wrapped("a\tb\n")[:-30]), AnswerCorrupted, "cut short"),
        (_event(stdout=_wrapped("a\tb\n").replace("a\tb", "a\tc")), AnswerCorrupted, "manifest"),
        (_event(stdout=_wrapped("x" * 65)), AnswerTooLarge, "cap of 64 bytes"),
        (_event(timedout={"period": 120}), RemoteTimeout, "timed out after 120s on executor ex-a"),
        (_event("runner_on_unreachable", msg="no route"), HostUnreachable, "no route"),
        (_event("runner_on_failed", msg="boom"), HostUnreachable, "failed on executor ex-a"),
        (None, HostUnreachable, "no answer"),
    ],
    ids=["cut", "altered", "too-large", "timeout", "unreachable", "failed", "none"],
)
def test_what_did_not_arrive_whole_is_an_error_never_an_answer(event, error, said):
    found = relay._answer("n1", event, CMD, "ex-a")
    assert isinstance(found, error), found
    assert said in found.message and found.where == "n1"
