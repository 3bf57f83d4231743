"""`gpuboot status`: the fleet view read from the controller's kept runs and scan history,
never from a host: last certify verdict and time, certificate expiry, stack, last scan,
drift and escalations, in natural host order."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from gpuboot import cli

# A scan's run. Scans before runs had their own kind were named -certify-: status still
# tells them from certifications by the history that names them.
SCAN_RUN = "20261124T090000-certify-bbbbbb"


def _run(runs, run_id: str, verdicts: dict[str, str], stack: str | None = None) -> None:
    run_dir = runs / run_id
    bundle = run_dir / "bundle"
    for host in verdicts:
        (bundle / host).mkdir(parents=True)
        pins = {"gpuboot_stack": stack} if stack else {}
        (bundle / host / "meta.json").write_text(json.dumps({"pins": pins}))
    nodes = [{"host": h, "verdict": v, "findings": []} for h, v in verdicts.items()]
    (run_dir / "report.json").write_text(
        json.dumps({"run_id": run_id, "bundle": str(bundle), "nodes": nodes})
    )


def _fleet(tmp_path):
    runs, home = tmp_path / "runs", tmp_path / "home"
    _run(runs, "20261120T080000-certify-aaaaaa", {"node10": "PASS", "node2": "PASS"}, "lts-550")
    expires = datetime.now(UTC) + timedelta(days=12, hours=1)
    cert_dir = runs / "20261120T080000-certify-aaaaaa" / "reports" / "certificates"
    cert_dir.mkdir(parents=True)
    (cert_dir / "node2.json").write_text(
        json.dumps({"host": "node2", "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%SZ")})
    )
    _run(runs, SCAN_RUN, {"node10": "FAIL", "node2": "PASS"})
    home.mkdir()
    rec = {"time": "2026-11-24T09:00:00Z", "run_id": SCAN_RUN, "inventory": "i"}
    history = [
        {**rec, "host": "node10", "verdict": "FAIL", "failing": {"NVL-001": "FAIL"},
         "new": ["NVL-001"], "escalated": ["xid:79@0000:18:00"]},
        {**rec, "host": "node2", "verdict": "PASS", "failing": {}},
    ]  # fmt: skip
    (home / "scan-history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in history))


def test_status_shows_each_node_from_runs_and_history_without_ssh(tmp_path, guard, capsys):
    _fleet(tmp_path)
    assert cli.main(["status", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [n["host"] for n in doc["nodes"]] == ["node2", "node10"]  # natural order
    node2, node10 = doc["nodes"]
    # the scan's run (named in the history) is not a certify: node10 was certified PASS
    assert node10["certify"]["verdict"] == "PASS" and node10["certify"]["stack"] == "lts-550"
    assert node10["certify"]["run_id"].endswith("aaaaaa")
    assert node2["certify"]["certificate"]["days_left"] == 12
    assert node10["certify"]["certificate"] is None
    assert node10["last_scan"]["time"] == "2026-11-24T09:00:00Z"
    assert node10["last_scan"]["failing"] == ["NVL-001"] and node10["last_scan"]["new"] == [
        "NVL-001"
    ]
    assert node10["last_scan"]["escalations"] == ["xid:79@0000:18:00"]
    assert guard == []  # no host was contacted


def test_status_with_an_inventory_lists_its_nodes_never_run_too(tmp_path, guard, capsys):
    _fleet(tmp_path)
    inv = tmp_path / "inv.yml"
    inv.write_text(
        "all:\n  vars: {gpuboot_profile: hgx-h100-sxm-8gpu, nvidia_driver_branch: '550',"
        " nvidia_driver_version: 550.54.15-1, ansible_host: 127.0.0.1}\n"
        "  hosts: {node10: {}, node3: {}}\n"
    )
    assert cli.main(["status", "-i", str(inv)]) == 0
    lines = capsys.readouterr().out.splitlines()
    body = [line for line in lines if line.startswith("node") and not line.startswith("node ")]
    assert [line.split()[0] for line in body] == ["node3", "node10"]
    assert "never certified" in body[0] and "never scanned" in body[0]
    assert "PASS" in body[1] and "NVL-001 (new: NVL-001)" in body[1] and "RMA" in body[1]
