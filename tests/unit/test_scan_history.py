"""The scan history over a year of scheduled scans: one read per scan feeds drift, the
folded node state, escalation and the trend page; compaction keeps what they read (the
folded state, per-boot faults, the trend's per-scan points) in a bounded size, crash-safe
(new file, fsync, rename) and private; a corrupt or hostile compacted record is skipped
with a warning (the node starts afresh), never trusted."""

from __future__ import annotations

import builtins
import io
import json
import multiprocessing
import os
import stat
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuboot import certify, escalation, scan, status
from gpuboot.report import trend
from gpuboot.results import RunReport

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

T0 = datetime(2025, 11, 24, tzinfo=UTC)
GPUS = [f"0000:{b:02x}:00" for b in range(0x18, 0x20)]
NOW = datetime(2026, 11, 24, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))  # status reads its runs


def _stamp(i: int) -> str:
    return (T0 + timedelta(hours=i)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _faults(node: int, i: int) -> list[str]:
    """Hardware faults that come back on some boots (a boot lasts 100 scans), a GPU
    replaced at scan 5,000 (its faults start afresh), a fatal SXid on one switch."""
    boot = i // 100
    out = []
    if node % 2 == 0 and boot % 3 != 1:
        out.append(f"xid:79@{GPUS[0]}")
    if node % 3 == 0 and boot % 4 == 0 and i % 7 == 0:
        out.append(f"remap-failure@{GPUS[2]}")
    if node == 1 and (i < 5000 or boot % 2 == 0) and i % 5 == 0:
        out.append(f"xid:48@{GPUS[3]}")
    if node == 3 and boot % 5 == 2:
        out.append("sxid:12028@0000:c1:00.0")
    return out


def _record(node: int, i: int, faults: escalation.FaultHistory) -> dict:
    host = f"node{node}"
    failing = {}
    if (i // 50 + node) % 4 == 0:
        failing["NVL-001"] = "FAIL"
    if i % 97 == node:
        failing["STK-002"] = "ERROR"  # not judged: the last known state carries over
    parts = {g: f"GPU-{node}-{g}" for g in GPUS}
    if node == 1 and i >= 5000:
        parts[GPUS[3]] = f"GPU-{node}-replacement"
    seen = escalation.Observation(
        None if i % 211 == 0 else f"boot-{node}-{i // 100}",  # some scans say no boot id
        {k: k for k in _faults(node, i)},
        parts,
    )
    found = escalation.escalations(seen, faults)
    rec = {
        "time": _stamp(i),
        "run_id": f"r{i}",
        "inventory": "/etc/gpuboot/site.yml",
        "host": host,
        "verdict": "FAIL" if failing else "PASS",
        "failing": failing,
        "new": [],
        "boot_id": seen.boot_id,
        "faults": sorted(seen.faults),
        "escalated": [e.fault for e in found],
        "gpus": parts,
        "figures": {"nvbandwidth_h2d": [50.0 + node + i % 3, "GB/s", 40.0]} if i % 500 == 0 else {},
    }
    faults.add(rec["time"], rec["boot_id"], rec["faults"], rec["escalated"], parts)
    return rec


def write_history(path: Path, scans: int, nodes: int) -> None:
    """``scans`` hourly scans of ``nodes`` nodes, as scans before compaction wrote them."""
    folds = [escalation.FaultHistory() for _ in range(nodes)]
    with open(path, "wb") as fh:
        for i in range(scans):
            fh.write(
                b"".join(
                    json.dumps(_record(n, i, folds[n]), sort_keys=True).encode() + b"\n"
                    for n in range(nodes)
                )
            )
    os.chmod(path, 0o600)


def decisions(history: Path) -> dict:
    """Every escalation decision the history's folded state gives, for faults on each part
    seen again on a new boot, on the last boot, without a boot id and after a GPU swap."""
    out = {}
    for host, node in sorted(scan.read_history(history).items()):
        keys = [*sorted(node.faults.boots), "xid:79@0000:1f:00"]
        last_boot = f"boot-{host[4:]}-{int(node.last['run_id'][1:]) // 100}"  # as _record
        for boot in ("boot-new", last_boot, None):
            for swap in (False, True):
                parts = {GPUS[0]: "GPU-swapped"} if swap else {}
                seen = escalation.Observation(boot, {k: k for k in keys}, parts)
                for reboots in (1, 2, 3, 5, 20):
                    out[host, boot, swap, reboots] = escalation.escalations(
                        seen, node.faults, reboots
                    )
        out[host, "drift"] = node.baseline()
    # and what `gpuboot status` shows of each node's last scan
    out["status"] = status.fleet_status(history=history, now=NOW)["nodes"]
    return out


def _fake_certify(hosts, failing=()):
    def certify_(_inventory, **_kw):
        findings = [{"rule": r, "status": "FAIL"} for r in failing]
        nodes = [
            {"host": h, "verdict": "FAIL" if failing else "PASS", "findings": findings}
            for h in hosts
        ]
        return RunReport.from_dict({"run_id": "r", "run_dir": "d", "nodes": nodes})

    return certify_


# ---------------------------------------------------------------- one read per scan
def test_a_scan_and_its_trend_page_open_the_history_once(tmp_path, monkeypatch):
    history = tmp_path / "scan-history.jsonl"
    write_history(history, 30, 3)
    monkeypatch.setattr(certify, "certify", _fake_certify(["node0", "node1", "node2"]))
    opened: list[str] = []
    real_os_open, real_open = os.open, io.open  # builtins.open is io.open; pathlib calls io.open

    def count(path):
        if os.path.realpath(path) == os.path.realpath(history):
            opened.append(str(path))

    def os_open(path, *a, **k):
        count(path)
        return real_os_open(path, *a, **k)

    def b_open(path, *a, **k):
        if isinstance(path, str | bytes | os.PathLike):
            count(path)
        return real_open(path, *a, **k)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", b_open)
    monkeypatch.setattr(io, "open", b_open)
    result = scan.scan(str(tmp_path / "inv.yml"), history=history)
    report = result.to_dict()
    # what `gpuboot scan` does next (gpuboot.cli.scan): the trend page from the history
    records = result.history.trend.records()
    page = trend.write(records, tmp_path / "trend.html", source=str(result.history_path), now=NOW)
    monkeypatch.undo()
    assert len(opened) == 1, opened
    assert report["nodes"][0]["drift"]["previous_scan"] == _stamp(29)
    assert "31 scans" in page.read_text()  # the page still has this scan's point


# ---------------------------------------------------------------- compaction keeps decisions
def test_escalation_decisions_are_identical_before_and_after_compacting_10000_scans(tmp_path):
    history = tmp_path / "scan-history.jsonl"
    write_history(history, 10_000, 4)
    before = decisions(history)
    size = history.stat().st_size
    scan.compact_history(history)
    assert history.stat().st_size < size / 20  # mostly the trend: a line a scan
    after = decisions(history)
    assert after == before
    # the synthetic history does escalate (faults on many boots), and a swapped GPU restarts
    rma = [k for k, v in before.items() if len(k) == 4 and v]
    assert rma and any(k[2] is False for k in rma)
    swapped = before["node0", "boot-new", True, 2]  # another GPU at 0000:18:00 now
    assert not any("@0000:18:00" in e.fault for e in swapped)
    assert any("@0000:18:00" in e.fault for e in before["node0", "boot-new", False, 2])
    # counted beyond the boot ids kept: node0's Xid 79 came back on ~67 boots
    (xid79,) = [e for e in before["node0", "boot-new", False, 20] if "xid:79" in e.fault]
    assert xid79.boots == 1 + sum(1 for b in range(100) if b % 3 != 1)
    (same,) = [e for e in before["node0", "boot-0-99", False, 20] if "xid:79" in e.fault]
    assert same.boots == xid79.boots - 1  # the boot it was last seen in: no reboot


def test_the_trend_page_is_the_same_before_and_after_compaction(tmp_path):
    history = tmp_path / "scan-history.jsonl"
    write_history(history, 1_500, 3)
    every = [json.loads(line) for line in history.read_bytes().splitlines()]
    page = trend.render(every, source="h", now=NOW)
    assert "1500 scans" in page and "NVL-001" in page and "nvbandwidth_h2d" in page
    scan.compact_history(history)
    assert len(scan.history_records(history)) < len(every) / 2
    assert trend.render(scan.history_records(history), source="h", now=NOW) == page


# ---------------------------------------------------------------- bounded size
def test_history_size_is_bounded_per_node_however_many_scans_ran(tmp_path, monkeypatch):
    monkeypatch.setattr(scan, "COMPACT_MIN_BYTES", 16 * 1024, raising=False)
    monkeypatch.setattr(scan, "TREND_SCANS_KEPT", 500, raising=False)
    history = tmp_path / "scan-history.jsonl"
    write_history(history, 10_000, 3)
    hosts = ["node0", "node1", "node2"]
    monkeypatch.setattr(certify, "certify", _fake_certify(hosts, ["NVL-001"]))
    sizes = []
    for _ in range(240):
        scan.scan(str(tmp_path / "inv.yml"), history=history)
        sizes.append(history.stat().st_size)
    # a compacted node: its last record and folded state; the trend: one small line a scan;
    # scans append until their records outweigh that, then compact: at most about twice
    bound = 2 * (len(hosts) * 8 * 1024 + 500 * 120) + 16 * 1024
    assert max(sizes) <= bound, (sizes, bound)
    assert max(sizes[120:]) <= max(sizes[:120]) * 1.05  # not growing with the scans


# ---------------------------------------------------------------- crash safety, modes
@pytest.mark.parametrize("fault", ["rename", "fsync", "interrupt"])
def test_a_compaction_that_fails_leaves_the_old_history_intact(tmp_path, monkeypatch, fault):
    history = tmp_path / "scan-history.jsonl"
    write_history(history, 300, 2)
    old = history.read_bytes()
    before = decisions(history)

    def boom(*_a, **_k):
        if fault == "interrupt":
            raise KeyboardInterrupt
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace" if fault != "fsync" else "fsync", boom)
    with pytest.raises(KeyboardInterrupt if fault == "interrupt" else OSError):
        scan.compact_history(history)
    monkeypatch.undo()
    assert history.read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scan-history.jsonl"]  # no temp
    assert decisions(history) == before


def test_a_scan_whose_compaction_fails_still_records_the_scan(tmp_path, monkeypatch):
    monkeypatch.setattr(scan, "COMPACT_MIN_BYTES", 0, raising=False)
    history = tmp_path / "scan-history.jsonl"
    write_history(history, 300, 1)
    monkeypatch.setattr(certify, "certify", _fake_certify(["node0"], ["XID-001"]))

    def full(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    said: list[str] = []
    scan.scan(str(tmp_path / "inv.yml"), history=history, progress=said.append)
    monkeypatch.undo()
    assert scan.last_records(history)["node0"]["failing"] == {"XID-001": "FAIL"}
    assert any("not compacted" in m and "No space left" in m for m in said), said


@pytest.mark.parametrize("mode", [0o600, 0o640])
def test_the_compacted_history_keeps_the_file_mode(tmp_path, mode):
    history = tmp_path / "scan-history.jsonl"
    write_history(history, 200, 2)
    os.chmod(history, mode)
    old_umask = os.umask(0)  # a permissive umask must not widen the new file
    try:
        scan.compact_history(history)
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(history.stat().st_mode) == mode
    assert history.stat().st_size < 200 * 2 * 300


# ---------------------------------------------------------------- corrupt and hostile
def _compacted(tmp_path) -> tuple[Path, list[dict]]:
    history = tmp_path / "scan-history.jsonl"
    write_history(history, 400, 2)
    scan.compact_history(history)
    recs = [json.loads(line) for line in history.read_bytes().splitlines()]
    return history, recs


HOSTILE = {
    "known not a map": lambda s: s.update(known=["NVL-001"]),
    "a fault that is not a list": lambda s: s["faults"].append("xid:79@0000:18:00"),
    "boot ids beyond the cap": lambda s: s["faults"][0].__setitem__(
        3, [f"b{i}" for i in range(escalation.BOOTS_KEPT + 1)]
    ),
    "a negative count": lambda s: s["faults"][0].__setitem__(2, -5),
    "a count that is not a number": lambda s: s["faults"][0].__setitem__(2, "9" * 9),
    "too many faults": lambda s: s.update(
        faults=[[f"xid:79@{i}", "t", 0, []] for i in range(escalation.MAX_FAULT_KEYS + 1)]
    ),
    "a part that is not a pair": lambda s: s["parts"].append(["0000:18:00"]),
    "an unknown version": lambda s: s.update(v=99),
}


@pytest.mark.parametrize("damage", sorted(HOSTILE))
def test_a_hostile_compacted_node_is_skipped_with_a_warning_and_starts_afresh(
    tmp_path, monkeypatch, damage
):
    history, recs = _compacted(tmp_path)
    line, rec = next(
        (n, r) for n, r in enumerate(recs, 1) if r.get("host") == "node0" and "state" in r
    )
    HOSTILE[damage](rec["state"])
    lines = history.read_bytes().splitlines()
    lines[line - 1] = json.dumps(rec).encode()
    history.write_bytes(b"\n".join(lines) + b"\n")
    warned: list[str] = []
    nodes = scan.read_history(history, warn=warned.append)
    assert "node0" not in nodes and "node1" in nodes
    assert any(w.startswith(f"{history}:{line}: warning") for w in warned), warned
    # a scan over it: node0 is a first scan (its failures new, exit 1), never a quiet pass
    monkeypatch.setattr(certify, "certify", _fake_certify(["node0"], ["NVL-001"]))
    report = scan.scan(str(tmp_path / "inv.yml"), history=history).to_dict()
    assert report["nodes"][0]["drift"]["new"] == ["NVL-001"] and report["exit_code"] == 1


def test_a_truncated_compacted_history_skips_the_torn_line_and_keeps_the_rest(tmp_path):
    history, _recs = _compacted(tmp_path)
    data = history.read_bytes()
    history.write_bytes(data[: len(data) - 40])  # cut inside the last node's record
    warned: list[str] = []
    nodes = scan.read_history(history, warn=warned.append)
    assert set(nodes) == {"node0"} and len(warned) == 1 and "not a JSON record" in warned[0]


def test_bad_lines_move_to_a_private_rejected_file_when_compacting(tmp_path):
    history = tmp_path / "scan-history.jsonl"
    write_history(history, 50, 2)
    with open(history, "ab") as fh:
        fh.write(b'{"host": "node0", "time": "t"}\n{"torn": ')
    warned: list[str] = []
    scan.compact_history(history, warn=warned.append)
    rejected = history.with_name(history.name + ".rejected")
    assert rejected.read_bytes() == b'{"host": "node0", "time": "t"}\n{"torn": \n'
    assert stat.S_IMODE(rejected.stat().st_mode) == 0o600
    assert any(str(rejected) in w for w in warned)
    warned.clear()
    scan.read_history(history, warn=warned.append)
    assert warned == []  # said once, kept for the operator, not on every later scan


# ---------------------------------------------------------------- concurrent scans
FORK = multiprocessing.get_context("fork")


def _scan_compacting(inventory, history, barrier, results):
    def slow_certify(*_a, **_k):
        time.sleep(0.6)  # the history is open: it is compacted (renamed over) meanwhile
        finding = {"rule": f"X{os.getpid()}", "status": "FAIL"}  # each scan its own rule
        node = {"host": "n1", "verdict": "FAIL", "findings": [finding]}
        return RunReport.from_dict({"run_id": f"r{os.getpid()}", "run_dir": "d", "nodes": [node]})

    certify.certify = slow_certify
    barrier.wait(30)
    drift = scan.scan(inventory, history=Path(history)).to_dict()["nodes"][0]["drift"]
    results.put((f"X{os.getpid()}", drift["cleared"]))


def test_concurrent_compacting_scans_each_see_the_one_before(tmp_path):
    """Scans that opened the history before it was compacted (renamed over) lock, read and
    append to the new file, not the replaced one (their records would be lost)."""
    history = tmp_path / "scan-history.jsonl"
    write_history(history, 200, 1)  # not due: these scans only append
    scan.append_history(history, [{"host": "n1", "time": "2026-01-01T00:00:00Z", "failing": {}}])
    barrier, results = FORK.Barrier(4), FORK.Queue()
    args = (str(tmp_path / "inv.yml"), str(history), barrier, results)
    procs = [FORK.Process(target=_scan_compacting, args=args) for _ in range(3)]
    for p in procs:
        p.start()
    barrier.wait(30)
    time.sleep(0.2)  # every scan has opened the history and is probing
    scan.compact_history(history)
    for p in procs:
        p.join(60)
    seen = dict(results.get(timeout=5) for _ in procs)
    # a chain: each scan cleared the rule of the one before it (none read a stale file)
    cleared = [c for cs in seen.values() for c in cs if c.startswith("X")]
    (last,) = set(seen) - set(cleared)
    assert sorted(cleared) == sorted(set(seen) - {last})
    assert scan.read_history(history)["n1"].known == {last: "FAIL"}


# ---------------------------------------------------------------- bounded reads
def _nested(depth: int) -> bytes:
    """A scan record whose 'faults' nest ``depth`` lists deep."""
    inner = "[" * depth + "]" * depth
    return (
        f'{{"host": "node0", "time": "{_stamp(99)}", "failing": {{}}, "faults": {inner}}}'.encode()
    )


@pytest.mark.parametrize("depth", [200, 100_000], ids=["deep", "past-the-decoder"])
def test_a_deeply_nested_line_is_skipped_with_a_warning_by_scan_status_and_trend(
    tmp_path, monkeypatch, depth
):
    history = tmp_path / "scan-history.jsonl"
    write_history(history, 3, 2)
    with open(history, "ab") as fh:
        fh.write(_nested(depth) + b"\n")
    line = len(history.read_bytes().splitlines())
    warned: list[str] = []
    assert set(scan.read_history(history, warn=warned.append)) == {"node0", "node1"}
    assert status.fleet_status(history=history, now=NOW, warn=warned.append)["nodes"]
    records = scan.history_records(history, warn=warned.append)
    assert "4 scans" not in trend.render(records, now=NOW)  # the nested one is no point
    monkeypatch.setattr(certify, "certify", _fake_certify(["node0", "node1"]))
    assert scan.scan(str(tmp_path / "inv.yml"), history=history, progress=warned.append)
    assert warned and all(f"{history}:{line}: warning" in w for w in warned), warned
    assert all("nests deeper than" in w for w in warned), warned


def test_an_overlong_line_is_skipped_unparsed(tmp_path):
    history = tmp_path / "scan-history.jsonl"
    write_history(history, 2, 1)
    pad = "x" * (16 * 1024 * 1024)  # a well-formed record past the line cap
    rec = {"host": "node0", "time": _stamp(9), "failing": {"NVL-001": "FAIL"}, "pad": pad}
    with open(history, "ab") as fh:
        fh.write(json.dumps(rec).encode() + b"\n")
    warned: list[str] = []
    nodes = scan.read_history(history, warn=warned.append)
    assert nodes["node0"].last["time"] == _stamp(1)
    assert len(warned) == 1 and "longer than 16777216 bytes" in warned[0], warned


def _special(tmp_path: Path, kind: str) -> Path:
    if kind == "FIFO":
        os.mkfifo(tmp_path / "fifo")
        return tmp_path / "fifo"
    if kind == "device":
        return Path("/dev/zero")
    (tmp_path / "real.jsonl").write_bytes(b"")
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "real.jsonl")
    return tmp_path / "link.jsonl"


READERS = {
    "scan": lambda h, inv: scan.scan(inv, history=h),
    "status": lambda h, _inv: status.fleet_status(history=h, now=NOW),
    "trend": lambda h, _inv: scan.history_records(h),
    "compact": lambda h, _inv: scan.compact_history(h),
}


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("kind", ["FIFO", "device", "link"])
def test_history_naming_a_fifo_device_or_link_is_refused_exit_2(
    tmp_path, monkeypatch, reader, kind
):
    from gpuboot.errors import BadInput

    monkeypatch.setattr(certify, "certify", _fake_certify(["node0"]))
    history = _special(tmp_path, kind)
    with pytest.raises(BadInput) as caught:
        READERS[reader](history, str(tmp_path / "inv.yml"))
    assert caught.value.exit_code == 2
    assert str(history) in (caught.value.where or ""), caught.value
