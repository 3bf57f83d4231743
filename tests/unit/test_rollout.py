"""Rollout arithmetic and the record --resume reads (no hosts involved)."""

from __future__ import annotations

import json

import pytest

from gpuboot import rollout
from gpuboot.errors import BadInput


@pytest.mark.parametrize(
    ("serial", "total", "size"),
    [(None, 7, 7), ("1", 7, 1), ("3", 7, 3), ("10%", 7, 1), ("50%", 7, 4), ("100%", 7, 7)],
)
def test_batch_size_counts_and_rounds_percentages_up(serial, total, size):
    assert rollout.batch_size(serial, total) == size


@pytest.mark.parametrize(("max_fail", "budget"), [(None, None), ("0", 0), ("2", 2), ("25%", 3)])
def test_failure_budget(max_fail, budget):
    assert rollout.failure_budget(max_fail, 10) == budget


@pytest.mark.parametrize("bad", ["0", "-1", "x", "150%", "%", "1.5"])
def test_bad_serial_is_refused_with_the_option_named(bad):
    with pytest.raises(BadInput) as exc:
        rollout.batch_size(bad, 10)
    assert "--serial" in str(exc.value) and exc.value.hint


def test_batches_keep_inventory_order():
    assert rollout.batches(["a", "b", "c", "d", "e"], 2) == [["a", "b"], ["c", "d"], ["e"]]


def test_budget_is_spent_only_past_the_limit():
    state = rollout.RolloutState(inventory="i", hosts=["a", "b", "c"], batch_size=1, budget=1)
    state.failed.append("a")
    assert not state.budget_spent
    state.failed.append("b")
    assert state.budget_spent and state.pending == ["c"]
    assert not rollout.RolloutState("i", ["a"], 1, None, failed=["a"]).budget_spent


def _record(
    runs, run_id, inventory, *, failed=(), converged=(), hosts=(), check=False, **kw
):  # fmt: skip
    (runs / run_id).mkdir(parents=True)
    state = rollout.RolloutState(
        inventory=str(inventory.resolve()),
        hosts=list(hosts),
        batch_size=1,
        budget=0,
        check=check,
        converged=list(converged),
        failed=list(failed),
        **kw,
    )
    state.save(runs / run_id)


def test_resume_latest_redoes_failed_and_never_started_hosts(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    monkeypatch.setenv("GPUBOOT_RUNS", str(runs))
    inv, other = tmp_path / "inv.yml", tmp_path / "other.yml"
    _record(runs, "20260101T000000-install-aaaaaa", inv, hosts=["n1"], failed=["n1"])
    _record(runs, "20260102T000000-install-bbbbbb", inv, hosts=["n1", "n2", "n3"],
            converged=["n1"], failed=["n2"])  # fmt: skip
    _record(runs, "20260103T000000-install-cccccc", inv, hosts=["n1"], check=True)
    _record(runs, "20260104T000000-install-dddddd", other, hosts=["x"], failed=["x"])
    found = rollout.resume_from(inv, "latest")
    assert found.run_id == "20260102T000000-install-bbbbbb"  # newest real run of this inventory
    assert found.hosts == ["n2", "n3"]
    assert rollout.resume_from(inv, "20260101T000000-install-aaaaaa").hosts == ["n1"]


def test_resume_refuses_unknown_runs_and_other_inventories(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    monkeypatch.setenv("GPUBOOT_RUNS", str(runs))
    inv = tmp_path / "inv.yml"
    with pytest.raises(BadInput, match="no earlier install run"):
        rollout.resume_from(inv, "latest")
    _record(runs, "20260104T000000-install-dddddd", tmp_path / "other.yml", hosts=["x"])
    with pytest.raises(BadInput, match="not an install run"):
        rollout.resume_from(inv, "20990101T000000-install-000000")
    with pytest.raises(BadInput, match=r"installed .*other\.yml"):
        rollout.resume_from(inv, "20260104T000000-install-dddddd")
    saved = json.loads((runs / "20260104T000000-install-dddddd" / "rollout.json").read_text())
    assert saved["pending"] == ["x"]


def test_a_later_run_that_converged_other_hosts_does_not_hide_a_stopped_rollout(
    tmp_path, monkeypatch
):
    runs = tmp_path / "runs"
    monkeypatch.setenv("GPUBOOT_RUNS", str(runs))
    inv = tmp_path / "inv.yml"
    canary = rollout.Settings(serial="1", max_fail="0", tags=("driver",))
    _record(runs, "20260101T000000-install-aaaaaa", inv, hosts=["n1", "n2", "n3"],
            converged=["n1"], failed=["n2"], settings=canary.to_dict())  # fmt: skip
    # the operator fixes n2 with `install --limit n2`: a complete run of its own
    _record(runs, "20260102T000000-install-bbbbbb", inv, hosts=["n2"], converged=["n2"])
    found = rollout.resume_from(inv, "latest")
    assert found.run_id == "20260101T000000-install-aaaaaa"
    assert found.hosts == ["n2", "n3"]
    assert (found.batch_size, found.budget, found.settings) == (1, 0, canary)


def test_a_rollout_continued_by_a_later_resume_is_not_resumed_again(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    monkeypatch.setenv("GPUBOOT_RUNS", str(runs))
    inv = tmp_path / "inv.yml"
    _record(runs, "20260101T000000-install-aaaaaa", inv, hosts=["n1", "n2"], failed=["n1"])
    _record(runs, "20260102T000000-install-bbbbbb", inv, hosts=["n1", "n2"],
            converged=["n1", "n2"], resumed_from="20260101T000000-install-aaaaaa")  # fmt: skip
    found = rollout.resume_from(inv, "latest")
    assert (found.run_id, found.hosts) == ("20260102T000000-install-bbbbbb", [])


def test_a_check_run_is_never_resumed_and_the_hint_re_runs_it_as_a_check(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    monkeypatch.setenv("GPUBOOT_RUNS", str(runs))
    inv = tmp_path / "inv.yml"
    dry = rollout.Settings(limit="gpu", serial="10%")
    _record(runs, "20260101T000000-install-aaaaaa", inv, hosts=["n1"], failed=["n1"],
            check=True, settings=dry.to_dict())  # fmt: skip
    with pytest.raises(BadInput) as exc:
        rollout.resume_from(inv, "20260101T000000-install-aaaaaa")
    assert "--check run" in str(exc.value)
    assert exc.value.hint.endswith(f"gpuboot install -i {inv} --check --limit gpu --serial 10%")
    with pytest.raises(BadInput, match="no earlier install run"):
        rollout.resume_from(inv, "latest")  # a check run is no candidate either


def test_a_resume_refuses_a_batch_size_other_than_the_recorded_one():
    recorded = rollout.Resume("r1", ["n2"], 1, 0, rollout.Settings(serial="1", max_fail="0"))
    rollout.check_resume_flags(recorded, rollout.Settings(serial="1"))  # the same: fine
    rollout.check_resume_flags(recorded, rollout.Settings())  # not given: the record's
    with pytest.raises(BadInput) as exc:
        rollout.check_resume_flags(recorded, rollout.Settings(serial="100%"))
    assert "--serial 100% differs" in str(exc.value) and "drop --serial" in exc.value.hint


def test_settings_survive_a_record_and_spell_a_complete_command(tmp_path):
    settings = rollout.Settings(
        limit="rack1", tags=("driver", "cuda"), serial="2", max_fail="10%",
        allow_reboot=True, kubeconfig="/etc/k 1", drain_timeout=900.0,
    )  # fmt: skip
    assert rollout.Settings.from_record(json.loads(json.dumps(settings.to_dict()))) == settings
    assert rollout.Settings.from_record({"serial": 5, "tags": "x"}) == rollout.Settings()
    assert settings.command("inv dir/hosts.yml") == (
        "gpuboot install -i 'inv dir/hosts.yml' --limit rack1 --tags driver,cuda --serial 2 "
        "--max-fail 10% --kubeconfig '/etc/k 1' --drain-timeout 900 --allow-reboot"
    )


def test_a_record_that_is_a_fifo_or_nested_deep_is_skipped_with_a_warning(tmp_path, monkeypatch):
    import os

    runs = tmp_path / "runs"
    monkeypatch.setenv("GPUBOOT_RUNS", str(runs))
    inv = tmp_path / "inv.yml"
    _record(runs, "20260101T000000-install-aaaaaa", inv, hosts=["n1"], failed=["n1"])
    (runs / "20260102T000000-install-fifo01").mkdir()
    os.mkfifo(runs / "20260102T000000-install-fifo01" / "rollout.json")
    (runs / "20260103T000000-install-deep01").mkdir()
    (runs / "20260103T000000-install-deep01" / "rollout.json").write_text("[" * 5000 + "]" * 5000)
    warned: list[str] = []
    found = rollout.resume_from(inv, "latest", warn=warned.append)
    assert found.run_id == "20260101T000000-install-aaaaaa"
    assert any("not a regular file" in w for w in warned)
    assert any("nests deeper" in w for w in warned)
