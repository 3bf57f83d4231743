"""gpuboot.node.lease, run for real as Ansible runs it on a node: one controller's run holds
a node at a time; another controller is refused naming the holder; an expired lease, or one
an earlier run of the same controller left, is taken over; take-or-refuse is atomic."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.unit.ansible.modrun import run_module

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

HALL_A = "ctl-a home 0123456789ab"
HALL_B = "ctl-b home ba9876543210"


def lease(root: Path, path: Path, run_id: str, controller: str, **args) -> dict:
    params = {"path": str(path), "run_id": run_id, "controller": controller, **args}
    return run_module("lease", root, params)


def write(path: Path, run_id: str, controller: str, expires: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"run_id": run_id, "controller": controller, "taken": expires - 3600, "expires": expires}
    path.write_text(json.dumps(doc))


def test_a_free_node_is_taken_for_the_run_until_its_ttl(tmp_path):
    path = tmp_path / "var" / "lib" / "gpuboot" / "lease.json"
    before = time.time()
    result = lease(tmp_path, path, "run-1", HALL_A, ttl=600)
    assert result["changed"] and not result.get("failed"), result
    held = json.loads(path.read_text())
    assert (held["run_id"], held["controller"]) == ("run-1", HALL_A)
    assert before + 600 <= held["expires"] <= time.time() + 600


def test_another_controllers_live_lease_is_refused_naming_its_holder(tmp_path):
    path = tmp_path / "lease.json"
    write(path, "20261127T130000-install-abcdef", HALL_A, time.time() + 600)
    kept = path.read_text()
    result = lease(tmp_path, path, "run-2", HALL_B)
    assert result.get("failed"), result
    assert "controller ctl-a home 0123456789ab" in result["msg"]
    assert "run 20261127T130000-install-abcdef" in result["msg"]
    assert f"remove {path}" in result["msg"]  # the way out once the holder is known dead
    assert path.read_text() == kept


def test_an_expired_lease_is_taken_over_and_named(tmp_path):
    path = tmp_path / "lease.json"
    write(path, "killed-run", HALL_A, time.time() - 1)
    result = lease(tmp_path, path, "run-2", HALL_B)
    assert result["changed"] and not result.get("failed"), result
    assert result["previous"]["run_id"] == "killed-run"
    assert "expired" in result["msg"]
    assert json.loads(path.read_text())["controller"] == HALL_B


def test_an_earlier_run_of_the_same_controller_is_taken_over(tmp_path):
    # that run is over: this controller's own flock on the node lets one run at a time
    path = tmp_path / "lease.json"
    write(path, "failed-run", HALL_A, time.time() + 600)
    result = lease(tmp_path, path, "run-2", HALL_A)
    assert result["changed"] and not result.get("failed"), result
    assert json.loads(path.read_text())["run_id"] == "run-2"


def test_the_holding_run_refreshes_its_expiry_and_keeps_its_start(tmp_path):
    path = tmp_path / "lease.json"
    write(path, "run-1", HALL_A, time.time() + 5)
    taken = json.loads(path.read_text())["taken"]
    result = lease(tmp_path, path, "run-1", HALL_A, ttl=900)
    assert result["changed"] and result["msg"].startswith("refresh"), result
    held = json.loads(path.read_text())
    assert held["taken"] == taken and held["expires"] > time.time() + 800


def test_release_removes_only_the_runs_own_lease(tmp_path):
    path = tmp_path / "lease.json"
    write(path, "run-1", HALL_A, time.time() + 600)
    other = lease(tmp_path, path, "run-9", HALL_B, state="released")
    assert not other["changed"] and path.exists(), other
    assert "taken over by ctl-a" in json.dumps(other["warnings"])
    own = lease(tmp_path, path, "run-1", HALL_A, state="released")
    assert own["changed"] and not path.exists(), own
    again = lease(tmp_path, path, "run-1", HALL_A, state="released")
    assert not again["changed"] and not again.get("failed"), again


def test_an_unreadable_lease_is_refused_with_the_way_out(tmp_path):
    path = tmp_path / "lease.json"
    path.write_text("{half a lease")
    result = lease(tmp_path, path, "run-2", HALL_B)
    assert result.get("failed") and "cannot be read" in result["msg"], result
    assert f"remove {path}" in result["msg"]


def test_check_mode_writes_nothing(tmp_path):
    path = tmp_path / "lease.json"
    params = {"path": str(path), "run_id": "run-1", "controller": HALL_A}
    result = run_module("lease", tmp_path, params, check=True)
    assert result["changed"] and not path.exists(), result


def test_controllers_arriving_at_once_leave_exactly_one_holder(tmp_path):
    path = tmp_path / "shared" / "lease.json"
    roots = [tmp_path / f"ctl{i}" for i in range(6)]
    for root in roots:
        root.mkdir()

    def take(i: int) -> dict:
        return lease(roots[i], path, f"run-{i}", f"ctl-{i} home {i:012d}")

    with ThreadPoolExecutor(max_workers=len(roots)) as pool:
        results = list(pool.map(take, range(len(roots))))
    winners = [i for i, r in enumerate(results) if not r.get("failed")]
    assert len(winners) == 1, results
    assert json.loads(path.read_text())["run_id"] == f"run-{winners[0]}"
    holder = f"ctl-{winners[0]} home {winners[0]:012d}"
    assert all(holder in r["msg"] for r in results if r.get("failed")), results
