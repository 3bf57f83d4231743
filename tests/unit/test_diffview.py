"""`install --check --diff` on the terminal: the differences (packages from -> to, files
as unified diffs, QoS, MIG), one block per distinct change set, counted as the play
counts; the whole diff in the run directory."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from gpuboot import cli, diffview, install
from gpuboot.runner import WOULD_RUN, EventFolder, PlayResult

DRV = "DRV-010 | PATCH | Install, pin and hold the driver at exactly 550.54.15-1"
NOUVEAU = "BASE-010 | PATCH | Blacklist the nouveau driver"
QOS = "QOS-011 | PATCH | Set trust, PFC and ECN of every RoCE rail on priorities 3"
MIG = "MIG-010 | PATCH | Apply the MIG layout"
AUDIT = "QOS-012 | PATCH | Re-apply the QoS at every boot"  # ran, changed nothing
RAILS = ("enp26s0np0", "enp60s0np0")
TIMERS_OFF = "BASE-022 | PATCH | Keep dnf-automatic off"
TIMERS = ("dnf-automatic.timer", "dnf-automatic-install.timer")
UNIT = "".join(f"line {i}\n" for i in range(40))  # a long new file


def packages_res(current: str) -> dict:
    return {
        "changed": True,
        "installed": ["nvidia-driver-550-open=550.54.15-1"],
        "removed": [],
        "held": ["nvidia-driver-550-open"],
        "pinned": True,
        "diff": [
            {
                "before_header": "/etc/apt/preferences.d/gpuboot-nvidia-driver",
                "before": "",
                "after": "Package: nvidia-driver-550-open\n",
            },
            {
                "before_header": "packages",
                "before": f"nvidia-driver-550-open {current}\n",
                "after": "nvidia-driver-550-open 550.54.15-1 held\n",
            },
        ],
    }


def host_events(host: str, current: str = "(not installed)", mig: bool = True) -> list[dict]:
    """One host's events as ansible-runner records them under --check --diff."""

    def ev(kind, task, res=None, **extra):
        data = {"host": host, "task": task, "task_uuid": task[:8], **extra}
        if res is not None:
            data["res"] = res
        return {"event": kind, "event_data": data}

    out = [
        ev(
            "runner_on_ok",
            NOUVEAU,
            {
                "changed": True,
                # gpuboot.node.managed_file's real shape
                "path": "/etc/modprobe.d/nouveau.conf",
                "invocation": {
                    "module_args": {"path": "/etc/modprobe.d/nouveau.conf", "content": UNIT}
                },
                "diff": {
                    "before_header": "/etc/modprobe.d/nouveau.conf",
                    "after_header": "/etc/modprobe.d/nouveau.conf",
                    "before": "",
                    "after": UNIT,
                },
            },
            resolved_action="gpuboot.node.managed_file",
        ),
        ev(
            "runner_on_ok",
            DRV,
            packages_res(current),
            resolved_action="gpuboot.node.pinned_packages",
        ),
        ev("runner_on_ok", AUDIT, {"changed": False}, role="roce_qos"),
        ev("runner_on_skipped", "DRV-016 | PATCH | Run the persistence daemon"),  # by `when`
    ]
    for timer in TIMERS:  # a loop of commands check mode did not run: one change
        out.append(
            ev(
                "runner_item_on_skipped",
                TIMERS_OFF,
                {
                    "changed": False,
                    "msg": WOULD_RUN,
                    "cmd": ["systemctl", "disable", "--now", timer],
                    "_ansible_item_label": timer,
                },
            )
        )
    out.append(ev("runner_on_skipped", TIMERS_OFF))
    # gpuboot.node.roce_qos in --check: every rail read, what it would set (its real shape)
    rail = {"trust": "pcp", "pfc_priorities": [], "set_qos": True}
    rails = {
        RAILS[0]: {**rail, "enable_ecn": ["roce_np/enable/3", "roce_rp/enable/3"]},
        RAILS[1]: {**rail, "enable_ecn": []},
        "enp90s0np0": {"trust": "dscp", "pfc_priorities": [3], "set_qos": False, "enable_ecn": []},
    }
    args = {"interfaces": [*RAILS, "enp90s0np0"], "trust": "dscp", "pfc_priorities": [3]}
    out.append(
        ev(
            "runner_on_ok",
            QOS,
            {"changed": True, "rails": rails, "invocation": {"module_args": args}},
            role="roce_qos",
            resolved_action="gpuboot.node.roce_qos",
        )
    )
    if mig:
        out.append(
            ev(
                "runner_on_ok",
                MIG,
                {
                    "changed": True,
                    "stdout_lines": ["GPU 0: MIG mode 0 -> 1"],
                },
                role="nvidia_mig",
            )
        )
    return out


def write_events(run_dir: Path, events: list[dict]) -> None:
    job = run_dir / "artifacts" / "job" / "job_events"
    job.mkdir(parents=True, exist_ok=True)
    for counter, event in enumerate(events, start=1):
        event = {**event, "counter": counter}
        (job / f"{counter}-{event['event']}.json").write_text(json.dumps(event))


def fleet_events() -> list[dict]:
    """node1-3 fresh (same change set), node4 on an older driver, node5 unchanged."""
    events = [e for n in ("node1", "node2", "node3") for e in host_events(n)]
    events += host_events("node4", current="550.40.07-1 held", mig=False)
    stats = {"ok": {f"node{i}": 3 for i in range(1, 6)}, "changed": {}, "skipped": {}}
    for n in ("node1", "node2", "node3"):
        stats["changed"][n] = 4  # ansible's own count: the timers' loop was a skip
        stats["skipped"][n] = 2
    stats["changed"]["node4"], stats["skipped"]["node4"] = 3, 2
    return [*events, {"event": "playbook_on_stats", "event_data": stats}]


def test_counts_equal_the_plays_count(tmp_path):
    events = fleet_events()
    write_events(tmp_path, events)
    folder = EventFolder()
    for event in events:
        folder(event)
    found = diffview.collect(tmp_path)
    assert (
        {h: len(c) for h, c in found.items()}
        == {h: r.changed for h, r in folder.hosts.items() if r.changed}
        == {"node1": 5, "node2": 5, "node3": 5, "node4": 4}
    )
    assert [c.task_id for c in found["node1"]] == [
        "BASE-010",
        "DRV-010",
        "BASE-022",
        "QOS-011",
        "MIG-010",
    ]


def test_groups_by_change_set_and_renders_each_kind(tmp_path):
    write_events(tmp_path, fleet_events())
    groups = diffview.group(diffview.collect(tmp_path), [f"node{i}" for i in range(5, 0, -1)])
    assert [g["label"] for g in groups] == ["node[1-3]", "node4", "node5"]
    text = diffview.render(groups, check=True)
    assert text.count("DRV-010") == 2  # once per change set, not once per host
    assert "nvidia-driver-550-open: (not installed) -> 550.54.15-1 held" in text
    assert "nvidia-driver-550-open: 550.40.07-1 held -> 550.54.15-1 held" in text
    assert "+++ /etc/modprobe.d/nouveau.conf" in text  # the target, not ansible's temp src
    assert "+line 5" in text and "+line 39" not in text  # long diffs cut on the terminal
    assert "more line(s) in diff.txt" in text
    assert (
        "enp26s0np0: trust pcp -> dscp; PFC priorities none -> 3; "
        "ECN on: roce_np/enable/3, roce_rp/enable/3" in text
    )
    assert "enp60s0np0: trust pcp -> dscp; PFC priorities none -> 3\n" in text
    assert "enp90s0np0" not in text  # a rail already right is not a change
    assert (
        "dnf-automatic-install.timer: systemctl disable --now dnf-automatic-install.timer" in text
    )
    assert "GPU 0: MIG mode 0 -> 1" in text
    assert "node5 (1 host): nothing to change" in text
    assert diffview.summary(groups, check=True).startswith(
        "would change (tasks that change something, counted as the real run counts them) "
        "per change set: node[1-3]: 5, node4: 4; 2 distinct change set(s) across 5 host(s)"
    )
    whole = diffview.write(tmp_path, groups, check=True).read_text()
    assert "+line 39" in whole and "more line(s)" not in whole  # the run dir keeps all


@pytest.fixture
def lab_inventory(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / "runs"))
    inv = tmp_path / "inv.yml"
    inv.write_text(
        "all:\n  vars:\n    gpuboot_profile: hgx-h100-sxm-8gpu\n"
        '    nvidia_driver_branch: "550"\n    nvidia_driver_version: "550.54.15-1"\n'
        "  hosts:\n" + "".join(f"    node{i}:\n" for i in range(1, 6))
    )
    return inv


def test_install_check_diff_prints_the_differences(monkeypatch, capsys, lab_inventory):
    def fake_run(spec, show, into, **_hooks):  # the play, as ansible-runner recorded it
        run_id, run_dir = into
        events = fleet_events()
        write_events(run_dir, events)
        folder = EventFolder()
        for event in events:
            folder(event)
        return PlayResult(run_id, run_dir, 0, "successful", 1.0, folder.hosts)

    monkeypatch.setattr(install, "run", fake_run)
    assert cli.main(["install", "-i", str(lab_inventory), "--check", "--diff", "-q"]) == 0
    out = capsys.readouterr().out
    assert "node[1-3] (3 hosts): 5 task(s) would change" in out
    assert "nvidia-driver-550-open: (not installed) -> 550.54.15-1 held" in out
    assert "enp26s0np0: trust pcp -> dscp" in out and "GPU 0: MIG mode 0 -> 1" in out
    assert "whole diff: " in out and "diff.txt" in out
    assert cli.main(["install", "-i", str(lab_inventory), "--check", "--diff", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(g["label"], g["count"]) for g in doc["diff"]] == [
        ("node[1-3]", 5),
        ("node4", 4),
        ("node5", 0),
    ]


def test_a_boot_unit_shows_its_file_and_its_enablement():
    path = "/etc/systemd/system/gpuboot-roce-qos.service"
    res = {  # gpuboot.node.systemd_unit's real shape: a new unit, written and enabled
        "changed": True,
        "path": path,
        "enabled_before": "",
        "invocation": {"module_args": {"name": "gpuboot-roce-qos.service", "content": UNIT}},
        "diff": [
            {"before_header": path, "after_header": path, "before": "", "after": UNIT},
            {
                "before_header": "systemctl is-enabled gpuboot-roce-qos.service",
                "after_header": "systemctl is-enabled gpuboot-roce-qos.service",
                "before": "",
                "after": "enabled\n",
            },
        ],
    }
    data = {"resolved_action": "gpuboot.node.systemd_unit", "role": "roce_qos"}
    change = diffview.describe(AUDIT, data, res, [])
    assert change.kind == "file", change
    assert f"+++ {path}" in change.lines and "+line 39" in change.lines
    assert "+++ systemctl is-enabled gpuboot-roce-qos.service" in change.lines
    assert change.lines[-1] == "+enabled"


@pytest.mark.parametrize(
    ("res", "line"),
    [
        (
            {"changed": True, "name": "openibd", "actions": ["enable", "start"]},
            "openibd: enable, start",
        ),
        (  # --check before DOCA-OFED is installed: the unit comes with its package
            {"changed": True, "name": "openibd", "actions": ["enable", "start"], "unit_missing": 1},
            "openibd: enable, start (the unit comes with this run)",
        ),
    ],
)
def test_a_package_unit_says_what_it_does_to_the_unit(res, line):
    data = {"resolved_action": "gpuboot.node.service", "role": "doca_ofed"}
    change = diffview.describe("OFED-014 | PATCH | Run openibd at boot and now", data, res, [])
    assert (change.kind, change.lines) == ("other", (line,))


def _within(seconds: float, call):
    """``call()``'s result, or a failed test when it blocks (a FIFO's open)."""
    out: dict = {}
    worker = threading.Thread(target=lambda: out.setdefault("value", call()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still reading after {seconds}s"
    return out["value"]


def test_a_fifo_among_the_job_events_is_skipped_not_waited_on(tmp_path):
    write_events(tmp_path, fleet_events())
    os.mkfifo(tmp_path / "artifacts" / "job" / "job_events" / "0-planted.json")
    found = _within(10, lambda: diffview.collect(tmp_path))
    assert {h: len(c) for h, c in found.items()} == {"node1": 5, "node2": 5, "node3": 5, "node4": 4}


def test_an_oversize_or_deeply_nested_event_is_skipped(tmp_path, monkeypatch):
    write_events(tmp_path, fleet_events())
    job = tmp_path / "artifacts" / "job" / "job_events"
    (job / "0-deep.json").write_text("[" * 100_000 + "]" * 100_000)
    monkeypatch.setattr(diffview, "EVENT_MAX_BYTES", 64 * 1024)
    huge = {"event": "runner_on_ok", "counter": 0, "event_data": {"host": "node9"}}
    huge["event_data"]["res"] = {"changed": True, "stdout": "x" * 100_000}
    (job / "0-huge.json").write_text(json.dumps(huge))
    found = diffview.collect(tmp_path)
    assert "node9" not in found and len(found["node1"]) == 5
