"""`gpuboot runs list|prune`: retention of the run directories install, certify and scan
keep (runner.new_run_dir), never the newest of a verb, never one in progress, never
anything that is not a run directory of the runs root (no symlink followed)."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from gpuboot import cli, locks, runner

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

FORK = multiprocessing.get_context("fork")


@pytest.fixture
def runs_root(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / "runs"))
    return tmp_path / "runs"


def _run(root: Path, verb: str, days_ago: float, size: int = 1000, n: int = 0) -> Path:
    """A run directory as runner.new_run_dir names it, started and last written to
    ``days_ago``."""
    started = time.time() - days_ago * 86400
    run_id = time.strftime("%Y%m%dT%H%M%S", time.localtime(started)) + f"-{verb}-{n:06x}"
    path = root / run_id
    (path / "artifacts").mkdir(parents=True)
    (path / "artifacts" / "stdout").write_bytes(b"x" * size)
    for p in (path / "artifacts" / "stdout", path / "artifacts", path):
        os.utime(p, (started, started))
    return path


def gpuboot(*argv: str, capsys) -> tuple[int, dict]:
    code = cli.main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_keep_n_per_verb_removes_the_oldest_and_says_what_it_freed(runs_root, capsys):
    installs = [_run(runs_root, "install", d, n=i) for i, d in enumerate((9, 7, 5, 3))]
    certs = [_run(runs_root, "certify", d, n=10 + i) for i, d in enumerate((8, 1))]
    code, doc = gpuboot("runs", "prune", "--keep", "2", capsys=capsys)
    assert code == 0
    assert [r["id"] for r in doc["removed"]] == [installs[0].name, installs[1].name]
    assert not installs[0].exists() and not installs[1].exists()
    assert all(p.exists() for p in installs[2:] + certs)
    assert doc["freed_bytes"] >= 2000
    code = cli.main(["runs", "prune", "--keep", "1", "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0 and "would remove" in out and "would free" in out
    assert installs[2].exists() and certs[0].exists()  # a dry run removes nothing


def test_older_than_never_removes_the_newest_run_of_a_verb(runs_root, capsys):
    old = _run(runs_root, "install", 30, n=1)
    newest = _run(runs_root, "install", 20, n=2)
    only_certify = _run(runs_root, "certify", 40, n=3)
    code, doc = gpuboot("runs", "prune", "--older-than", "14d", capsys=capsys)
    assert code == 0
    assert [r["id"] for r in doc["removed"]] == [old.name]
    assert newest.exists() and only_certify.exists()
    kept = {k["id"]: k["why"] for k in doc["kept"]}
    assert kept[newest.name] == kept[only_certify.name] == "newest of its verb"


def _holder(run_id: str, ready, done) -> None:
    with locks.hold({"n1": "192.0.2.1:22"}, "install"):
        locks.note_run(run_id)
        ready.set()
        done.wait(30)


def test_a_run_whose_process_holds_a_lock_is_kept(runs_root, capsys):
    busy = _run(runs_root, "install", 10, n=1)
    _run(runs_root, "install", 1, n=2)
    ready, done = FORK.Event(), FORK.Event()
    proc = FORK.Process(target=_holder, args=(busy.name, ready, done))
    proc.start()
    try:
        assert ready.wait(20)
        code, doc = gpuboot("runs", "prune", "--keep", "1", capsys=capsys)
        assert code == 0 and doc["removed"] == []
        assert busy.exists()
        assert {k["id"]: k["why"] for k in doc["kept"]}[busy.name] == "in progress"
        _code, listed = gpuboot("runs", "list", capsys=capsys)
        assert {r["id"]: r["in_progress"] for r in listed["runs"]}[busy.name] is True
    finally:
        done.set()
        proc.join(20)
    code, doc = gpuboot("runs", "prune", "--keep", "1", capsys=capsys)
    assert [r["id"] for r in doc["removed"]] == [busy.name]  # the lock is gone: it may go


def test_a_run_written_to_minutes_ago_is_kept_without_a_lock(runs_root, capsys):
    """install --check takes no host lock: a run still being written is in progress."""
    checking = _run(runs_root, "install", 9, n=1)
    (checking / "artifacts" / "job_events").mkdir()  # ansible-runner writing events now
    _run(runs_root, "install", 1, n=2)
    code, doc = gpuboot("runs", "prune", "--keep", "1", capsys=capsys)
    assert code == 0 and doc["removed"] == [] and checking.exists()
    assert {k["id"]: k["why"] for k in doc["kept"]}[checking.name] == "in progress"


def test_nothing_outside_the_runs_root_and_no_symlink_is_touched(runs_root, tmp_path, capsys):
    outside = tmp_path / "precious"
    (outside / "data").mkdir(parents=True)
    (outside / "data" / "keep.txt").write_text("mine")
    old = _run(runs_root, "install", 9, n=1)
    (old / "artifacts" / "link").symlink_to(outside)  # a link inside a run: removed as a link
    then = time.time() - 9 * 86400  # written long ago
    os.utime(old / "artifacts" / "link", (then, then), follow_symlinks=False)
    os.utime(old / "artifacts", (then, then))
    _run(runs_root, "install", 1, n=2)
    fake = runs_root / f"{old.name[:-6]}abcdef"  # a run's name, but a symlink to elsewhere
    fake.symlink_to(outside)
    (runs_root / "notes").mkdir()  # not a run's name
    code, doc = gpuboot("runs", "prune", "--keep", "1", capsys=capsys)
    assert code == 0
    assert [r["id"] for r in doc["removed"]] == [old.name]
    assert (outside / "data" / "keep.txt").read_text() == "mine"
    assert fake.is_symlink() and (runs_root / "notes").is_dir()


def test_real_run_dirs_of_every_verb_are_recognised(runs_root, capsys):
    ids = [runner.new_run_dir(verb)[0] for verb in ("install", "certify", "scan")]
    _code, doc = gpuboot("runs", "list", capsys=capsys)
    assert {(r["id"], r["verb"]) for r in doc["runs"]} == {
        (i, v) for i, v in zip(ids, ("install", "certify", "scan"), strict=True)
    }


@pytest.mark.parametrize(
    "argv",
    [
        ["runs", "prune"],
        ["runs", "prune", "--keep", "0"],
        ["runs", "prune", "--older-than", "fortnight"],
        ["runs", "prune", "--keep", "2", "--older-than", "3d"],
    ],
)
def test_bad_retention_is_exit_2_before_anything_is_removed(runs_root, argv, capsys):
    run = _run(runs_root, "install", 9, n=1)
    _run(runs_root, "install", 1, n=2)
    assert cli.main(argv) == 2
    assert run.exists()
    assert "Traceback" not in capsys.readouterr().err


def test_prune_of_a_missing_runs_root_frees_nothing(runs_root, capsys):
    code, doc = gpuboot("runs", "prune", "--keep", "3", capsys=capsys)
    assert code == 0 and doc["removed"] == [] and doc["freed_bytes"] == 0
    assert not os.path.exists(runs_root)


def _certificate(run: Path, host: str, *, days_left: float) -> None:
    expires = time.gmtime(time.time() + days_left * 86400)
    cert = {"host": host, "expires_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", expires)}
    (run / "reports" / "certificates").mkdir(parents=True, exist_ok=True)
    (run / "reports" / "certificates" / f"{host}.json").write_text(json.dumps(cert))
    _backdate(run)


def _backdate(run: Path) -> None:
    """Every file of ``run`` last written when the run started: not a run in progress."""
    started = (run / "artifacts").stat().st_mtime
    for p in [*sorted(run.rglob("*"), reverse=True), run]:
        os.utime(p, (started, started))


def test_a_nodes_newest_valid_certificate_outlives_any_number_of_later_scans(runs_root, capsys):
    first = _run(runs_root, "certify", 6, n=1)
    _certificate(first, "node1", days_left=20)
    _certificate(first, "node2", days_left=20)
    second = _run(runs_root, "certify", 5, n=2)
    _certificate(second, "node2", days_left=25)  # node2's newer certificate
    expired = _run(runs_root, "certify", 4, n=3)
    _certificate(expired, "node3", days_left=-1)  # vouches for nothing any more
    forged = _run(runs_root, "certify", 4, n=4)
    _certificate(forged, "node4", days_left=20)
    (forged / "reports" / "certificates" / "node4.json").write_text('{"host": "node9"}')
    _backdate(forged)
    scans = [_run(runs_root, "certify", d, n=10 + i) for i, d in enumerate((3, 2, 1))]
    code, doc = gpuboot("runs", "prune", "--keep", "1", capsys=capsys)
    assert code == 0
    kept = {r["id"]: r["why"] for r in doc["kept"]}
    assert kept[first.name] == "holds the newest valid certificate of node1"
    assert kept[second.name] == "holds the newest valid certificate of node2"
    removed = {r["id"] for r in doc["removed"]}
    assert removed == {expired.name, forged.name, scans[0].name, scans[1].name}
    assert first.exists() and second.exists() and not expired.exists()


def test_the_evidence_of_an_open_rma_escalation_is_kept(runs_root, capsys):
    evidence = _run(runs_root, "certify", 5, n=1)
    cleared = _run(runs_root, "certify", 4, n=2)
    later = [_run(runs_root, "certify", d, n=10 + i) for i, d in enumerate((3, 2))]
    history = runs_root.parent / "home" / "scan-history.jsonl"
    history.parent.mkdir(parents=True, exist_ok=True)
    records = [
        {"host": "node1", "run_id": evidence.name, "escalated": ["xid:79:0000:07:00"]},
        {"host": "node2", "run_id": cleared.name, "escalated": ["xid:79:0000:08:00"]},
        {"host": "node2", "run_id": later[0].name, "escalated": []},  # released since
    ]
    stamp = {"time": "2026-11-27T00:00:00Z", "failing": {}}
    lines = [json.dumps({**stamp, **r}) + "\n" for r in records]
    history.write_text("".join(lines))
    code, doc = gpuboot("runs", "prune", "--keep", "1", capsys=capsys)
    assert code == 0
    kept = {r["id"]: r["why"] for r in doc["kept"]}
    assert kept[evidence.name] == "evidence of an open RMA escalation"
    assert {r["id"] for r in doc["removed"]} == {cleared.name, later[0].name}


def test_a_fifo_in_place_of_a_certificate_vouches_for_nothing_and_never_holds_the_prune(
    runs_root, capsys
):
    certified = _run(runs_root, "certify", 6, n=1)
    _certificate(certified, "node1", days_left=20)
    fifo_run = _run(runs_root, "certify", 5, n=2)
    (fifo_run / "reports" / "certificates").mkdir(parents=True)
    os.mkfifo(fifo_run / "reports" / "certificates" / "node2.json")
    _backdate(fifo_run)
    newest = _run(runs_root, "certify", 1, n=3)
    done = FORK.Queue()

    def prune():
        done.put(cli.main(["runs", "prune", "--keep", "1", "-q"]))

    worker = FORK.Process(target=prune)
    worker.start()
    worker.join(20)
    hung = worker.is_alive()
    if hung:
        worker.kill()
    assert not hung, "runs prune waited on the FIFO"
    assert done.get(timeout=5) == 0
    assert certified.exists() and newest.exists() and not fifo_run.exists()
