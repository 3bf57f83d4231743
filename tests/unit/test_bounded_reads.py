"""Reads the controller makes of what it does not control, each within a cap: a node's answer
(read chunk by chunk, cut off at the cap), and the files an operator points gpuboot at."""

import json
import subprocess
import sys
import textwrap

import pytest

from gpuboot import remote


# ---------------------------------------------------------------- a node's answer
def _child(code: str) -> dict:
    """Run ``code`` in a fresh interpreter (its own peak RSS) and return the JSON it prints."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.subprocess
def test_a_300_mb_node_answer_is_cut_off_at_the_cap_while_read_not_buffered_whole():
    got = _child(
        """
        import json, resource, testinfra
        from gpuboot import remote
        remote.MAX_ANSWER_BYTES = 8 * 1024 * 1024
        host = testinfra.get_host("local://")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            remote.run_with_deadline(host, "head -c 300000000 /dev/zero", 120, "collection")
            error = None
        except remote.AnswerTooLarge as exc:
            error = exc.message
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({"error": error, "grew_kb": after - before}))
        """
    )
    assert got["error"] and "cap of 8388608 bytes" in got["error"], got
    assert got["grew_kb"] < 64 * 1024, got  # the cap and a chunk, not the 300 MB answer


@pytest.mark.subprocess
def test_an_answer_within_the_cap_is_returned_whole_with_its_exit_code_and_stderr():
    import testinfra

    host = testinfra.get_host("local://")
    out = remote.run_with_deadline(
        host, "head -c 100000 /dev/zero | tr '\\0' a; echo oops >&2; exit 3", 60, "x"
    )
    assert out.stdout == "a" * 100000
    assert out.stderr == "oops\n"
    assert out.rc == 3


@pytest.mark.subprocess
def test_stderr_past_what_is_kept_is_read_and_dropped_not_an_error():
    import testinfra

    host = testinfra.get_host("local://")
    out = remote.run_with_deadline(
        host, "head -c 3000000 /dev/zero >&2; echo done", 60, "x", max_bytes=1024
    )
    assert out.stdout == "done\n"
    assert len(out.stderr_bytes) == remote.STDERR_KEPT


def test_an_answer_over_the_cap_is_that_nodes_error_naming_the_cap(monkeypatch):
    from gpuboot import node_collect

    def too_large(*_a, **_k):
        raise remote.AnswerTooLarge("evidence collection: the node's answer passed the cap")

    monkeypatch.setattr(node_collect, "run_with_deadline", too_large)
    with pytest.raises(remote.AnswerTooLarge) as caught:
        node_collect.collect_node("n1", object(), {})
    assert caught.value.where == "n1"
