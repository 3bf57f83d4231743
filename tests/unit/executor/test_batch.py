"""One batch across the controller and executors, merged (pure: no executor runs here)."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

from gpuboot.executor.batch import NEVER_REACHED, play_batch, shard_results
from gpuboot.executor.outcome import ShardOutcome
from gpuboot.progress import InstallProgress, Screen
from gpuboot.runner import HostResult, broken_hosts

HINT = "gpuboot install -i inv.yml --resume R1"


def _controller(seen: list):
    def play(hosts, hook):
        seen.append(hosts)
        result = {"c1": HostResult(host="c1", ok=3, changed=1)}
        hook({"event": "runner_on_ok", "event_data": {"host": "c1", "task": "t"}}, result)
        hook({"event": "playbook_on_stats", "event_data": {}}, result)  # one source's end
        return SimpleNamespace(hosts=result, to_dict=lambda: {"rc": 0, "hosts": {}})

    return play


def test_an_unanswered_executor_leaves_its_hosts_unknown_and_the_controller_plays_its_own(
    tmp_path,
):
    seen: list = []
    events: list = []
    found = play_batch(
        {"controller": ["c1"], "ex-b": ["b1", "b2"]},
        controller=_controller(seen),
        jobs={},
        unanswered={"ex-b": "exit 255: Connection timed out"},
        run_dir=tmp_path,
        results_dir=tmp_path,
        hint=HINT,
        on_event=lambda event, hosts: events.append((event["event"], sorted(hosts))),
    )
    assert seen == [["c1"]]  # never the executor's hosts from the controller
    assert {h: (r.status, r.executor) for h, r in found.items()} == {
        "c1": ("changed", "controller"),
        "b1": ("unknown", "ex-b"),
        "b2": ("unknown", "ex-b"),
    }
    assert "did not answer: exit 255" in found["b1"].reason and found["b1"].reason.endswith(HINT)
    assert broken_hosts(found) == []  # unknown never counts as bad
    # progress: the controller's own stats did not end the batch; one end, with every host
    assert [e for e, _ in events] == ["runner_on_ok", "playbook_on_stats"]
    assert events[-1][1] == ["b1", "b2", "c1"]
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["hosts"]["b1"]["executor"] == "ex-b" and doc["hosts"]["b1"]["status"] == "unknown"
    assert doc["shards"]["ex-b"]["state"] == "lost" and doc["controller"] == {"rc": 0}


def test_a_lost_shard_keeps_what_finished_and_a_complete_one_fails_a_host_never_reached():
    done = HostResult(host="h1", ok=2)
    verdicts = {"h1": "ok", "h2": "unknown"}
    lost = ShardOutcome("lost", "running", None, "the stream was cut", verdicts, {"h1": done})
    found = shard_results("ex-a", lost, HINT)
    assert (found["h1"].status, found["h1"].executor) == ("ok", "ex-a")
    assert found["h2"].status == "unknown"
    assert (
        found["h2"].reason == f"executor ex-a: shard lost: the stream was cut; to finish it: {HINT}"
    )
    verdicts = {"h1": "ok", "h3": "unknown"}
    whole = ShardOutcome("complete", "successful", 0, None, verdicts, {"h1": done})
    found = shard_results("ex-a", whole, HINT)
    assert found["h3"].status == "failed" and found["h3"].reason == NEVER_REACHED


def test_progress_counts_unknown_hosts_apart(tmp_path):
    out = io.StringIO()
    progress = InstallProgress(Screen(out, tty=False))
    progress.batch(1, 1, ["c1", "b1"], 2)
    play_batch(
        {"controller": ["c1"], "ex-b": ["b1"]},
        controller=_controller([]),
        jobs={},
        unanswered={"ex-b": "no answer"},
        run_dir=tmp_path,
        results_dir=tmp_path,
        hint=HINT,
        on_event=progress.event,
    )
    progress.close()
    last = out.getvalue().splitlines()[-1]
    assert "2/2 hosts done" in last and "1 changed" in last and "1 unknown" in last
    assert "0 failed" in last
