"""EventFolder on recorded ansible-runner job events."""

import json

from gpuboot.runner import EventFolder
from tests.paths import REPO

FIXTURES = REPO / "tests" / "fixtures" / "runner"


def replay(name: str, folder: EventFolder) -> EventFolder:
    for line in (FIXTURES / name).read_text().splitlines():
        assert folder(json.loads(line)) is True  # False would drop the event from artifacts
    return folder


def test_failed_hosts_carry_task_and_reason():
    folder = replay("install-2hosts-persistenced-timeout.jsonl", EventFolder())
    assert folder.stats_seen
    assert sorted(folder.hosts) == ["node1", "node2"]
    for result in folder.hosts.values():
        assert result.status == "failed"
        assert result.failed_task.startswith("DRV-016")
        assert "nvidia-persistenced" in result.reason
        assert (result.ok, result.changed, result.failed, result.skipped) == (10, 6, 1, 1)
        assert any(t.startswith("DRV-010") for t in result.changes)


def test_live_updates_see_each_host_progress():
    seen = []
    replay(
        "install-2hosts-persistenced-timeout.jsonl",
        EventFolder(lambda hosts: seen.append({h: r.task for h, r in hosts.items()})),
    )
    tasks = [s.get("node1") for s in seen if s.get("node1")]
    first = {t.split(" ")[0]: i for i, t in reversed(list(enumerate(tasks)))}
    assert first["REPO-001"] < first["DRV-010"] < first["DRV-016"]


def test_unreachable_and_ignored_failures():
    folder = EventFolder()
    folder({"event": "runner_on_start", "event_data": {"host": "a", "task": "T1"}})
    folder(
        {
            "event": "runner_on_unreachable",
            "event_data": {
                "host": "a",
                "task": "T1",
                "res": {"msg": "ssh: connect to host 10.0.0.1 port 22: No route"},
            },
        }
    )
    folder(
        {
            "event": "runner_on_failed",
            "event_data": {"host": "b", "task": "T1", "ignore_errors": True, "res": {"msg": "x"}},
        }
    )
    folder({"event": "runner_on_ok", "event_data": {"host": "b", "task": "T1", "res": {}}})
    folder(
        {
            "event": "playbook_on_stats",
            "event_data": {"ok": {"b": 1}, "dark": {"a": 1}, "failures": {}, "changed": {}},
        }
    )
    assert folder.hosts["a"].status == "unreachable"
    assert "No route" in folder.hosts["a"].reason
    assert folder.hosts["b"].status == "ok"


def _skipped(task: str, res: dict) -> dict:
    return {"event": "runner_on_skipped", "event_data": {"host": "n1", "task": task, "res": res}}


def test_check_mode_counts_a_patch_command_it_did_not_run_as_a_change():
    # ansible's answers in --check (ansible-core 2.19): a command skipped for check mode,
    # and one skipped by its `when`.
    would_run = {"changed": False, "msg": "Command would have run if not in check mode"}
    by_when = {"changed": False, "skip_reason": "Conditional result was False"}
    folder = EventFolder()
    ecn = "QOS-011 | PATCH | Enable ECN (DCQCN) on priorities 3"  # a loop, one item per rail
    for res in (by_when, would_run):
        folder({**_skipped(ecn, res), "event": "runner_item_on_skipped"})
    folder(_skipped(ecn, {}))  # the loop's own skip event carries no result
    folder(_skipped("QOS-012 | PATCH | Re-apply the QoS at every boot", by_when))
    folder(_skipped("X-001 | AUDIT | Read something", would_run))  # no change: an audit
    folder({"event": "playbook_on_stats", "event_data": {"changed": {}, "skipped": {"n1": 3}}})
    result = folder.hosts["n1"]
    assert result.changes == ["QOS-011 | PATCH | Enable ECN (DCQCN) on priorities 3"]
    assert (result.changed, result.skipped, result.status) == (1, 2, "changed")
