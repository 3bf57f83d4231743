"""`gpuboot breaker status|reset`: what is open and why, exit 6 while a breaker is open, a
reset that closes and remembers, a typo refused, and an unreadable state named with its fix
(never shown as "no breaker open")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import pytest

from gpuboot import cli
from gpuboot.breaker import EXIT_BREAKER_OPEN, BreakerState, Trip


@pytest.fixture
def state(tmp_path, monkeypatch) -> BreakerState:
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    return BreakerState()


def _trip(rule: str = "XID-001") -> Trip:
    return Trip(rule, "Xid 79 (GPU has fallen off the bus) on <pci>", ("n1", "n2", "n3", "n4"),
                5, "2026-11-27T10:00:00Z", "20261127-100000-scan-ab12")  # fmt: skip


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_status_with_nothing_open_exits_0(state, capsys):
    code, out, _ = _run(capsys, "breaker", "status", "--json")
    assert code == 0 and json.loads(out) == {"state": str(state.path), "open": []}
    assert _run(capsys, "breaker")[0] == 0  # status is the default action


def test_status_names_each_open_breaker_and_exits_6(state, capsys):
    state.trip([_trip(), _trip("NVL-001")])
    code, out, _ = _run(capsys, "breaker", "status")
    assert code == EXIT_BREAKER_OPEN == 6
    assert "breaker open for XID-001: 4 of 5 nodes fail it for the same reason: Xid 79" in out
    assert "gpuboot breaker reset --rule XID-001" in out and "nodes: n1, n2, n3, n4" in out
    code, out, _ = _run(capsys, "breaker", "status", "--json")
    doc = json.loads(out)
    assert code == 6 and [t["rule"] for t in doc["open"]] == ["NVL-001", "XID-001"]
    assert doc["open"][1]["nodes"] == ["n1", "n2", "n3", "n4"] and doc["open"][1]["judged"] == 5


def test_reset_one_rule_then_all(state, capsys):
    state.trip([_trip(), _trip("NVL-001")])
    code, out, _ = _run(capsys, "breaker", "reset", "--rule", "XID-001", "--reason", "fixed")
    assert code == 0 and "closed: XID-001" in out and "still open: NVL-001" in out
    assert list(state.open_rules()) == ["NVL-001"]
    code, out, _ = _run(capsys, "breaker", "reset", "--json")
    assert code == 0 and json.loads(out)["closed"] == ["NVL-001"] and state.open_rules() == {}
    closed = json.loads(state.path.read_text())["closed"]
    assert [(c["rule"], c["reset_reason"]) for c in closed] == [("XID-001", "fixed"),
                                                                  ("NVL-001", None)]  # fmt: skip
    code, out, _ = _run(capsys, "breaker", "reset", "--rule", "XID-001")
    assert code == 0 and "no breaker open for XID-001" in out  # a known rule, not open


def test_reset_of_a_rule_gpuboot_does_not_have_is_bad_input(state, capsys):
    state.trip([_trip()])
    code, _, err = _run(capsys, "breaker", "reset", "--rule", "XID-01")
    assert code == 2 and "--rule: 'XID-01' is not a rule id" in err
    assert "hint: gpuboot breaker reset --rule XID-001" in err
    assert list(state.open_rules()) == ["XID-001"]


def test_an_unreadable_state_is_an_error_with_its_fix_and_reset_sets_it_aside(state, capsys):
    state.path.parent.mkdir(parents=True)
    state.path.write_text('{"version": 1, "open": {"XID-001": 7}, "closed": []}')
    code, out, err = _run(capsys, "breaker", "status")
    assert code == 2 and out == "" and str(state.path) in err
    assert "hint: restore the file from a backup, or close every breaker" in err
    assert "gpuboot breaker reset" in err
    assert _run(capsys, "breaker", "reset", "--rule", "XID-001")[0] == 2  # needs the whole fix
    code, out, _ = _run(capsys, "breaker", "reset", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["unreadable_set_aside"].startswith(f"{state.path}.unreadable-")
    assert _run(capsys, "breaker", "status")[0] == 0


# ------------------------------------------------------------------ `gpuboot scan` and the breaker
XID79 = "Xid 79 (GPU has fallen off the bus) on 0000:{bus}:00.0"
HOSTS = [f"node{i}" for i in range(1, 6)]


def _finding(rule: str, status: str, reason: str = "") -> dict:
    return {"rule": rule, "title": rule, "status": status, "reason": reason, "action": "a"}


def _scanned(failing: dict[str, dict[str, tuple[str, str]]], hosts=HOSTS) -> dict:
    """A scan's report: each host's failing rules (rule -> (status, reason)), every other
    rule of the catalogue PASS, failures new."""
    from tests.unit.k8s.conftest import with_catalogue

    nodes = []
    for host in hosts:
        bad = failing.get(host, {})
        given = [_finding(r, s, why) for r, (s, why) in bad.items()]
        statuses = {s for s, _ in bad.values()}
        verdict = "FAIL" if "FAIL" in statuses else "ERROR" if statuses else "PASS"
        new = sorted(r for r, (s, _) in bad.items() if s == "FAIL")  # ERROR: not judged
        drift = {"previous_scan": None, "new": new, "still": [], "cleared": []}
        unjudged = sorted(r for r, (s, _) in bad.items() if s == "ERROR")
        nodes.append({"host": host, "verdict": verdict, "findings": with_catalogue(given),
                      "drift": drift, "unjudged": unjudged, "escalations": []})  # fmt: skip
    return {"run_id": "20261127T100000-certify-aaaaaa", "nodes": nodes}


@pytest.fixture
def site(tmp_path, monkeypatch):
    """Five nodes in an inventory and in a fake cluster; `scan` judges what ``site.next``
    holds (no host is reached)."""
    from gpuboot import scan
    from gpuboot.results import RunReport
    from gpuboot_lab.kubeapi import FakeApiServer, node

    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / "runs"))
    inventory = tmp_path / "fleet.yml"
    inventory.write_text(
        "all:\n  vars:\n    gpuboot_profile: hgx-h100-sxm-8gpu\n"
        '    nvidia_driver_branch: "550"\n    nvidia_driver_version: "550.54.15-1"\n'
        "    ansible_host: 127.0.0.1\n  hosts:\n"
        + "".join(f"    {h}: {{ansible_port: {2200 + i}}}\n" for i, h in enumerate(HOSTS))
    )
    server = FakeApiServer().start()
    for host in HOSTS:
        server.add(node(host))

    class Site:
        next: ClassVar[dict] = {}
        scans = 0
        textfiles = tmp_path / "textfiles"
        history = str(tmp_path / "history.jsonl")
        fleet = inventory
        api = server
        kubeconfig = str(server.write_kubeconfig(tmp_path / "kubeconfig"))

        def scan(self, capsys, *extra: str, json_out: bool = True) -> tuple[int, dict | str]:
            argv = ["scan", "-q", "-i", str(inventory), "--kubeconfig", self.kubeconfig,
                    "--textfile-dir", str(self.textfiles), "--history", self.history,
                    *extra]  # fmt: skip
            code = cli.main([*argv, "--json"] if json_out else argv)
            out = capsys.readouterr().out
            return code, json.loads(out) if json_out else out

    site = Site()
    site.textfiles.mkdir()

    def fake_scan(_inventory, *, history, **_kw):
        site.scans += 1
        run_dir = tmp_path / f"run{site.scans}"
        report = RunReport.from_dict({**site.next, "run_dir": str(run_dir)})
        return scan.ScanResult(report, scan.History(), history)

    monkeypatch.setattr(scan, "scan", fake_scan)
    try:
        yield site
    finally:
        server.stop()


def _ours(site, host: str) -> bool:
    """gpuboot's taint is on the node: it is out of service."""
    taints = site.api.nodes[host]["spec"].get("taints") or []
    return any(t.get("key") == "gpuboot.io/uncertified" for t in taints)


def _state(site, host: str) -> str | None:
    return (site.api.nodes[host]["metadata"].get("labels") or {}).get("gpuboot.io/state")


def _prom(site) -> str:
    return (site.textfiles / "gpuboot-scan.prom").read_text()


def test_four_of_five_with_the_same_xid_none_taken_out_one_alert_exit_6(site, capsys):
    site.next = _scanned({h: {"XID-001": ("FAIL", XID79.format(bus=16 + i))}
                          for i, h in enumerate(HOSTS[:4])})  # fmt: skip
    code, doc = site.scan(capsys)
    assert code == EXIT_BREAKER_OPEN and doc["exit_code"] == 6
    assert doc["breaker"]["opened"] == ["XID-001"]
    (alert,) = doc["breaker"]["alerts"]
    assert alert.startswith(
        "breaker open for XID-001: 4 of 5 nodes fail it for the same reason: "
        "Xid 79 (GPU has fallen off the bus) on <pci>; suspect the rule"
    )
    # the complete command, for the breakers kept beside this scan's history
    assert alert.endswith(f"gpuboot breaker reset --rule XID-001 --history {site.history}")
    assert not any(_ours(site, h) for h in HOSTS)  # none taken out ...
    assert [_state(site, h) for h in HOSTS[:4]] == ["noncompliant"] * 4  # ... but flagged
    held = {a["node"]: a["held"] for a in doc["k8s_gate"]}
    assert all("breaker open for XID-001" in (held[h] or "") for h in HOSTS[:4])
    assert Path(doc["reports"]["breaker"]).is_file()  # recorded with the run
    prom = _prom(site)
    assert 'gpuboot_scan_breaker_open{rule="XID-001"} 1' in prom
    assert 'gpuboot_scan_breaker_open{rule="NVL-001"} 0' in prom
    assert 'gpuboot_scan_gate_nodes{outcome="held"} 4' in prom
    assert 'gpuboot_scan_gate_nodes{outcome="out"} 0' in prom
    assert "gpuboot_scan_nodes_unavailable" in prom
    # the same day again, as an operator reads it: the alert once, not once per node
    code, text = site.scan(capsys, json_out=False)
    assert code == 6 and text.count("breaker open for XID-001:") == 1
    assert "(open since " in text


def test_the_breaker_stays_open_until_reset_which_judges_afresh(site, capsys):
    site.next = _scanned({h: {"XID-001": ("FAIL", XID79.format(bus=17))} for h in HOSTS[:3]})
    assert site.scan(capsys)[0] == 6
    site.next = _scanned({})  # every node passes: open still, until a human says otherwise
    code, doc = site.scan(capsys)
    assert code == 6 and doc["breaker"]["opened"] == [] and len(doc["breaker"]["alerts"]) == 1
    site.next = _scanned({"node1": {"XID-001": ("FAIL", XID79.format(bus=17))}})
    assert site.scan(capsys)[0] == 6 and not _ours(site, "node1")  # held: its rule is open
    # the breakers of that history's fleet, kept beside it
    reset = ["breaker", "reset", "--rule", "XID-001", "--history", site.history, "--json"]
    assert cli.main(reset) == 0
    assert json.loads(capsys.readouterr().out)["state"] == f"{site.history}.breaker.json"
    code, doc = site.scan(capsys)  # afresh: one node failing is one node's fault
    assert code == 1 and doc["breaker"]["open"] == [] and _ours(site, "node1")


def test_a_node_failing_another_rule_too_is_taken_out_while_the_breaker_is_open(site, capsys):
    failing = {h: {"XID-001": ("FAIL", XID79.format(bus=17))} for h in HOSTS[:3]}
    failing["node1"]["NVL-001"] = ("FAIL", "GPU 1 NVLink 3 down")
    site.next = _scanned(failing)
    assert site.scan(capsys)[0] == 6 and _ours(site, "node1")
    assert not _ours(site, "node2") and not _ours(site, "node3")


def test_error_never_counts_towards_the_breaker(site, capsys):
    site.next = _scanned({h: {"XID-001": ("ERROR", "dmesg printed nothing")} for h in HOSTS})
    code, doc = site.scan(capsys)
    assert code == 4 and doc["breaker"]["open"] == []  # not judged; nothing to correlate
    assert not any(_ours(site, h) for h in HOSTS)


def test_a_recovered_node_is_released_while_the_breaker_is_open(site, capsys, tmp_path):
    _certified(tmp_path / "runs", "node5")
    site.api.edit("node5", _taken_out)
    site.next = _scanned({h: {"XID-001": ("FAIL", XID79.format(bus=17))} for h in HOSTS[:4]})
    assert site.scan(capsys)[0] == 6 and not _ours(
        site, "node5"
    )  # passing, certified: back in service
    assert 'gpuboot_scan_gate_nodes{outcome="in_service"} 1' in _prom(site)


def test_a_passing_node_without_a_valid_certificate_stays_out(site, capsys, tmp_path):
    site.api.edit("node5", _taken_out)
    site.next = _scanned({})
    code, doc = site.scan(capsys)
    assert code == 0 and _ours(site, "node5")  # certify, with its probes, lets it back in
    assert [a["node"] for a in doc["k8s_gate"]] == []


def test_an_unreadable_breaker_state_refuses_the_scan_before_any_host(site, capsys, tmp_path):
    state = tmp_path / "home" / "breaker.json"
    state.parent.mkdir(parents=True)
    state.write_text("{torn")
    code = cli.main(["scan", "-q", "-i", str(tmp_path / "fleet.yml")])
    err = capsys.readouterr().err
    assert code == 2 and site.scans == 0 and "gpuboot breaker reset" in err


def test_scan_remediate_leaves_the_nodes_the_breaker_holds_alone(
    site, capsys, monkeypatch, tmp_path
):
    from gpuboot.remediate import run as remediate_run
    from gpuboot.report import certificate

    given = []

    class Result:
        exit_code = 0

        def to_dict(self):
            step = {"step": "reconcile", "result": "passed", "detail": ""}
            node = {"host": "node4", "steps": [step], "outcome": "passed", "skipped": None}
            return {"dry_run": False, "nodes": [node], "exit_code": 0}

    def ladder(_inv, *, report, **kw):
        given.extend(n.host for n in report.nodes if n.verdict == "FAIL")
        given.append((kw["sign_key"], kw["scan_history"]))
        return Result()

    monkeypatch.setattr(remediate_run, "run_ladder", ladder)
    failing = {h: {"XID-001": ("FAIL", XID79.format(bus=17))} for h in HOSTS[:3]}
    failing["node4"] = {"NVL-001": ("FAIL", "GPU 1 NVLink 3 down")}  # its own fault
    site.next = _scanned(failing)
    key = tmp_path / "key.pem"
    certificate.generate_key(key)
    code, doc = site.scan(capsys, "--remediate", "--sign-key", str(key))
    assert code == 6 and given[0] == "node4"  # a shared cause is not rebooted away
    assert given[1:] == [(key, Path(site.history))]  # its certify signs; its history is ours
    assert doc["remediation"]["nodes"][0]["outcome"] == "passed"
    assert 'gpuboot_scan_remediation_steps{step="reconcile",result="passed"} 1' in _prom(site)


def test_a_sign_key_without_remediate_or_unusable_is_refused_before_any_host(site, capsys):
    inventory = str(Path(site.history).with_name("fleet.yml"))
    key = Path(site.history).with_name("nokey.pem")
    assert cli.main(["scan", "-q", "-i", inventory, "--sign-key", str(key)]) == 2
    assert "--sign-key: only --remediate certifies" in capsys.readouterr().err
    assert cli.main(["scan", "-q", "-i", inventory, "--remediate", "--sign-key", str(key)]) == 2
    assert str(key) in capsys.readouterr().err and site.scans == 0


def _taken_out(doc: dict) -> None:
    doc["spec"]["taints"] = [
        {"key": "gpuboot.io/uncertified", "value": "true", "effect": "NoSchedule"}
    ]
    doc["metadata"]["annotations"]["gpuboot.io/taken-out-at"] = "1764230000"
    doc["metadata"]["labels"]["gpuboot.io/state"] = "taken-out"


def _certified(runs: Path, host: str, *, gap: str | None = None) -> None:
    """A kept certify run that passed ``host`` and issued it a full certificate (``gap``
    "no-pair": partial, its pair probe not run)."""
    from gpuboot.report import certificate
    from tests.unit.k8s.conftest import Reports

    unpaired = {"rule": "BW-006", "title": "t", "status": "SKIPPED", "reason": "no partner"}
    report = Reports(runs.parent / "certs").make(
        {host: "PASS"}, findings={host: [unpaired]} if gap else None
    )
    run_dir = runs / "20261127T090000-certify-bbbbbb"
    (run_dir / "reports" / "certificates").mkdir(parents=True)
    (run_dir / "report.json").write_text(json.dumps({**report, "run_dir": str(run_dir)}))
    issued = Path(report["reports"][f"certificate:{host}"])
    (run_dir / "reports" / "certificates" / f"{host}.json").write_bytes(issued.read_bytes())
    assert (certificate.partial(json.loads(issued.read_text())) is None) == (gap is None)


@pytest.mark.parametrize("accepts", [None, "[no-pair]"])
def test_a_partial_certificate_is_released_only_where_the_group_accepts_its_gap(
    site, capsys, tmp_path, accepts
):
    """As certify's gate: a node whose certificate lacks its pair probe comes back into
    service on a clean scan only when its gpuboot_accept_partial names no-pair."""
    if accepts:
        text = site.fleet.read_text()
        site.fleet.write_text(
            text.replace("  hosts:\n", f"    gpuboot_accept_partial: {accepts}\n  hosts:\n")
        )
    _certified(tmp_path / "runs", "node5", gap="no-pair")
    site.api.edit("node5", _taken_out)
    site.next = _scanned({})
    code, _doc = site.scan(capsys)
    assert code == 0 and _ours(site, "node5") == (accepts is None)


def test_scan_names_certificates_expiring_soon_and_does_not_release_an_expired_one(
    site, capsys, tmp_path
):
    from datetime import UTC, datetime, timedelta

    _certified(tmp_path / "runs", "node5")
    cert = tmp_path / "runs" / "20261127T090000-certify-bbbbbb" / "reports" / "certificates"
    path = cert / "node5.json"

    def expires(days: float) -> None:
        doc = json.loads(path.read_text())
        at = datetime.now(UTC) + timedelta(days=days, hours=1)
        path.write_text(json.dumps({**doc, "expires_at": at.strftime("%Y-%m-%dT%H:%M:%SZ")}))

    expires(3)
    site.next = _scanned({})
    code, out = site.scan(capsys, json_out=False)
    assert code == 0 and "certificates expiring within 7 days: node5 (3 d)" in out
    assert "gpuboot certify -i" in out and "--limit node5" in out
    code, doc = site.scan(capsys, "--cert-expiry-days", "2")
    assert doc["certificates"] == {}
    expires(-2)
    site.api.edit("node5", _taken_out)
    code, doc = site.scan(capsys)
    assert doc["certificates"]["node5"]["days_left"] < 0
    assert _ours(site, "node5")  # an expired certificate lets no node back in
