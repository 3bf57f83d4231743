"""The walking skeleton end to end on a 2-node lab: install, pin, certify, faults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpuboot import runner
from gpuboot_lab import kubeapi as fake
from gpuboot_lab import lab as labmod
from gpuboot_lab.podman import exists

from .conftest import gpuboot, ssh

pytestmark = pytest.mark.lab
PINNED = [
    "nvidia-driver-550",
    "nvidia-dkms-550",
    "nvidia-utils-550",
    "nvidia-compute-utils-550",
    "gpuboot-probes",
]


def certify(lab, *extra):
    proc = gpuboot("certify", "-i", str(lab.inventory), "--json", *extra)
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads(proc.stdout)
    return proc.returncode, {n["host"]: n for n in doc["nodes"]}


def failed_rules(node):
    return {f["rule"]: f for f in node["findings"] if f["status"] not in ("PASS", "SKIPPED")}


def test_host_keys_are_checked(lab2, tmp_path):
    assert ssh(lab2, "node1", "true").returncode == 0
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    refused = ssh(lab2, "node1", "true", known_hosts=str(empty))
    assert refused.returncode == 255
    assert "Host key verification failed" in refused.stderr


def test_a_deep_runs_directory_still_reaches_the_hosts(lab2, tmp_path, monkeypatch):
    """A run's ssh master sockets go in its directory only where ssh's longest socket path
    still fits a Unix socket's: under a deep GPUBOOT_RUNS every host was unreachable."""
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / ("x" * 60)))
    checked = gpuboot(
        *("install", "-i", str(lab2.inventory), "--limit", "node1", "--json"),
        *("--check", "--tags", "always"),  # the read-only checks every install starts with
        check_rc=0,
    )
    doc = json.loads(checked.stdout)
    assert doc["hosts"]["node1"]["status"] == "ok", doc["hosts"]
    assert not runner.control_dir(Path(doc["run_dir"])).exists()  # gone with the play


def test_uncertified_before_install(lab2):
    rc, nodes = certify(lab2)
    assert rc == 1
    for node in nodes.values():
        assert node["verdict"] == "FAIL"
        assert "nvidia-utils-550 is not installed" in failed_rules(node)["STK-001"]["reason"]


def plan(lab):
    doc = json.loads(gpuboot("plan", "-i", str(lab.inventory), "--json", check_rc=0).stdout)
    return {n["host"]: n for n in doc["nodes"]}


def test_check_mode_reports_changes_and_makes_none(lab2):
    before = plan(lab2)
    assert all(n["changes"] == 4 for n in before.values())
    assert {i["action"] for i in before["node1"]["items"]} == {"install"}
    doc = json.loads(
        gpuboot("install", "-i", str(lab2.inventory), "--check", "--json", check_rc=0).stdout
    )
    assert all(r["changed"] > 0 for r in doc["hosts"].values())
    assert plan(lab2) == before  # nothing was installed


def test_install_converges_then_changes_nothing(lab2):
    first = json.loads(gpuboot("install", "-i", str(lab2.inventory), "--json", check_rc=0).stdout)
    assert {h: r["status"] for h, r in first["hosts"].items()} == {
        "node1": "changed",
        "node2": "changed",
    }
    second = json.loads(gpuboot("install", "-i", str(lab2.inventory), "--json", check_rc=0).stdout)
    for host, result in second["hosts"].items():
        assert result["changed"] == 0, f"{host} changed on the second run: {result['changes']}"
    holds = ssh(lab2, "node1", "apt-mark showhold").stdout.split()
    assert sorted(holds) == sorted(PINNED)
    after = plan(lab2)
    assert all(n["changes"] == 0 and not n["reboot"] for n in after.values())


def test_limit_tags_and_forks_narrow_the_run(lab2):
    doc = json.loads(
        gpuboot(
            "install",
            "-i",
            str(lab2.inventory),
            "--limit",
            "node2",
            "--tags",
            "driver",
            "--forks",
            "1",
            "--json",
            check_rc=0,
        ).stdout
    )
    assert list(doc["hosts"]) == ["node2"]
    result = doc["hosts"]["node2"]
    assert result["changed"] == 0 and result["ok"] > 0
    stdout = (Path(doc["run_dir"]) / "stdout").read_text()
    assert "DRV-010" in stdout and "REPO-001" not in stdout  # --tags driver only


def test_unattended_upgrade_keeps_the_pins(lab2):
    # 550.144.03 is in the repository: a plain upgrade must not take it.
    out = ssh(
        lab2, "node1", "apt-get -s -o Debug::NoLocking=1 upgrade; apt-cache policy nvidia-utils-550"
    )
    assert out.returncode == 0, out.stderr
    assert "Inst nvidia" not in out.stdout
    assert "550.144.03-1" in out.stdout  # the newer version exists and is refused


def test_certify_passes_healthy_nodes(lab2):
    rc, nodes = certify(lab2)
    assert rc == 0, nodes
    assert {h: n["verdict"] for h, n in nodes.items()} == {"node1": "PASS", "node2": "PASS"}


def test_xid_79_fails_only_that_node(lab2):
    gpuboot("lab", "fault", "--name", lab2.name, "node2", "xid", "79", check_rc=0)
    try:
        proc = gpuboot("certify", "-i", str(lab2.inventory))
        assert proc.returncode == 1
        rc, nodes = certify(lab2)
        assert nodes["node1"]["verdict"] == "PASS"
        assert nodes["node2"]["verdict"] == "FAIL"
        xid = failed_rules(nodes["node2"])["XID-001"]
        assert "Xid 79" in xid["reason"] and xid["action"]
        assert "XID-001" in proc.stdout and "Xid 79" in proc.stdout  # the human table too
        gpuboot("lab", "clear", "--name", lab2.name, "node2", check_rc=0)
        rc, nodes = certify(lab2)  # repaired, but the kernel log still holds the Xid
        assert "Xid 79" in failed_rules(nodes["node2"])["XID-001"]["reason"]
    finally:
        gpuboot("lab", "clear", "--reboot", "--name", lab2.name, "node2", check_rc=0)
    rc, nodes = certify(lab2)  # after the reboot: driver loads, persistence on, log clean
    assert rc == 0 and nodes["node2"]["verdict"] == "PASS", nodes["node2"]


def test_driver_mismatch_fails_stack_rule(lab2):
    gpuboot("lab", "fault", "--name", lab2.name, "node1", "driver-mismatch", check_rc=0)
    try:
        rc, nodes = certify(lab2)
        assert rc == 1 and nodes["node2"]["verdict"] == "PASS"
        assert "STK-001" in failed_rules(nodes["node1"])
    finally:
        gpuboot("lab", "clear", "--reboot", "--name", lab2.name, "node1", check_rc=0)


def test_unreachable_host_never_stops_the_others(lab2, tmp_path):
    inventory = yaml.safe_load(lab2.inventory.read_text())
    spare_ip = lab2.nodes[-1].ip.rsplit(".", 1)[0] + ".250"  # in the lab subnet, no node there
    inventory["all"]["children"]["gpu_nodes"]["hosts"]["ghost"] = {"ansible_host": spare_ip}
    path = tmp_path / "with-ghost.yml"
    path.write_text(yaml.safe_dump(inventory))

    install = json.loads(gpuboot("install", "-i", str(path), "--json", check_rc=1).stdout)
    assert install["hosts"]["ghost"]["status"] == "unreachable"
    assert install["hosts"]["ghost"]["reason"]
    assert install["hosts"]["node1"]["status"] == "ok"

    proc = gpuboot("certify", "-i", str(path), "--json", check_rc=1)
    nodes = {n["host"]: n for n in json.loads(proc.stdout)["nodes"]}
    assert nodes["ghost"]["verdict"] == "ERROR"  # never certified, never called faulty hardware
    assert nodes["node1"]["verdict"] == "PASS" and nodes["node2"]["verdict"] == "PASS"


def test_evaluate_rejudges_the_bundle_offline(lab2):
    gpuboot("lab", "fault", "--name", lab2.name, "node1", "xid", "48", check_rc=0)
    try:
        doc = json.loads(gpuboot("certify", "-i", str(lab2.inventory), "--json").stdout)
    finally:
        gpuboot("lab", "clear", "--reboot", "--name", lab2.name, "node1", check_rc=0)
    offline = json.loads(
        gpuboot("evaluate", "--bundle", doc["bundle"], "--json", check_rc=1).stdout
    )
    assert [(n["host"], n["verdict"]) for n in offline["nodes"]] == [
        (n["host"], n["verdict"]) for n in doc["nodes"]
    ]


def test_lab_down_removes_every_object(make_lab):
    lab = make_lab(nodes=1)
    ids = [lab.nodes[0].container_id, lab.repo_container_id]
    labmod.down(lab.name)
    assert not any(exists("container", i) for i in ids)
    assert not exists("network", lab.network_id)
    assert not lab.dir.exists()


def test_join_gate_admits_only_certified_nodes(lab2, tmp_path):
    taint = {"key": "gpuboot.io/uncertified", "value": "true", "effect": "NoSchedule"}
    server = fake.FakeApiServer().start()
    try:
        for name in ("node1", "node2"):
            server.add(fake.node(name, taints=[dict(taint)]))
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        key = tmp_path / "signing.pem"
        gpuboot("certify", "--gen-key", str(key), check_rc=0)
        gpuboot("lab", "fault", "--name", lab2.name, "node2", "xid", "79", check_rc=0)
        # the lab pins a driver only: no stack provides CUDA, DCGM or DOCA, so the probes the
        # SKU requires do not run and node1's certificate is partial (no-tool): the site's
        # policy for these nodes accepts exactly that
        site = yaml.safe_load(lab2.inventory.read_text())
        site["all"].setdefault("vars", {})["gpuboot_accept_partial"] = ["no-tool"]
        accepting = tmp_path / "site.yml"
        accepting.write_text(yaml.safe_dump(site))
        proc = gpuboot(
            "certify",
            "-i",
            str(accepting),
            "--sign-key",
            str(key),
            "--kubeconfig",
            str(kubeconfig),
            "--json",
            check_rc=1,
        )
        doc = json.loads(proc.stdout)
        verdicts = {n["host"]: (n["verdict"], failed_rules(n)) for n in doc["nodes"]}
        assert verdicts["node1"][0] == "PASS" and verdicts["node2"][0] == "FAIL", verdicts
        assert "certificate:node1" in doc["reports"] and "certificate:node2" not in doc["reports"]
        (n1,) = [n for n in doc["nodes"] if n["host"] == "node1"]
        assert n1["certification"]["not_accepted"] == [], n1["certification"]
        ok = gpuboot(
            "certify",
            "--verify",
            doc["reports"]["certificate:node1"],
            "--pubkey",
            f"{key}.pub",
            "--host",
            "node1",
            "-i",
            str(accepting),
            check_rc=0,
        )
        assert "valid" in ok.stdout

        node1, node2 = server.nodes["node1"], server.nodes["node2"]
        assert taint["key"] not in [t["key"] for t in node1["spec"]["taints"]]
        assert node1["metadata"]["labels"]["gpuboot.io/certified"] == "true"
        assert not node1["spec"].get("unschedulable")
        assert taint["key"] in [t["key"] for t in node2["spec"]["taints"]]
        assert node2["metadata"]["labels"]["gpuboot.io/certified"] == "false"
        assert "XID-001" in node2["metadata"]["labels"]["gpuboot.io/failed-rules"]
        assert not node2["spec"].get("unschedulable")  # kept out by the taint, not a cordon
    finally:
        server.stop()
        gpuboot("lab", "clear", "--reboot", "--name", lab2.name, "node2", check_rc=0)
