"""A certificate says exactly what was proven (probe level, every check, full or partial
scope), about exactly one node (host and hardware fingerprint), for a bounded time."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuboot.checks.rules import RULES
from gpuboot.errors import BadInput
from gpuboot.k8s.decision import decide
from gpuboot.profiles import PROFILE_DIR
from gpuboot.report import certificate, extent
from gpuboot.results import NodeReport, RunReport

from .conftest import NOW
from .sample import make_bundle, write_manifest

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

PAIR_SKIP = "not applicable: {}: no pair probe in this run"
PROBE_RULES = ("BW-001", "BW-002", "BW-003", "BW-004", "BW-005", "BW-006", "DCG-001")


def node_report(host: str = "gpu-a01", **override: tuple[str, str]) -> dict[str, Any]:
    """A PASS node report with a finding for every rule of the catalogue;
    ``override`` rule id (with _ for -) -> (status, reason)."""
    findings = []
    for rule in RULES:
        status, reason = override.get(rule.id.replace("-", "_"), ("PASS", "ok"))
        findings.append({"rule": rule.id, "title": rule.title, "status": status, "reason": reason})
    return {"host": host, "verdict": "PASS", "findings": findings, "measurements": []}


# what the pair phase records in meta.json for a node it found no partner for
NO_PARTNER = {
    "pairs": {
        kind: {"gpu-a01": {"status": "none", "reason": "no partner node in this run"}}
        for kind in ("ib_write_bw", "tcp_bw")
    }
}


def single_node_run() -> dict[str, Any]:
    """`certify --limit node1`: the pair probes found no partner and did not run."""
    return node_report(
        BW_005=("SKIPPED", PAIR_SKIP.format("ib_write_bw")),
        BW_006=("SKIPPED", PAIR_SKIP.format("tcp_bw")),
    )


def pub(key: Path) -> Path:
    return key.with_name(key.name + ".pub")


def test_full_certificate_records_probe_level_and_every_check(tmp_path, key):
    bundle = make_bundle(tmp_path, ["gpu-a01"], level="quick")
    cert = certificate.issue(NodeReport.from_dict(node_report()), bundle, key, now=NOW)
    assert (cert["scope"], cert["missing"], cert["probes"]) == ("full", [], "quick")
    assert [r["rule"] for r in cert["rules"]] == sorted(r.id for r in RULES)
    assert set(cert["required"]) == set(PROBE_RULES)  # the H100 SKU has every part
    result = certificate.verify(cert, pub(key), host="gpu-a01", now=NOW)
    assert result.ok, result.reason


def test_single_node_run_without_pair_partner_is_partial(tmp_path, key):
    bundle = make_bundle(tmp_path, ["gpu-a01"], level="quick", meta=NO_PARTNER)
    cert = certificate.issue(NodeReport.from_dict(single_node_run()), bundle, key, now=NOW)
    assert cert["scope"] == "partial"
    assert [(m["check"], m["gap"]) for m in cert["missing"]] == [
        ("BW-005", "no-pair"),
        ("BW-006", "no-pair"),
    ]
    assert "no pair probe" in cert["missing"][0]["reason"]
    skipped = {r["rule"]: r for r in cert["rules"] if r["status"] == "SKIPPED"}
    assert skipped["BW-006"]["reason"] == PAIR_SKIP.format("tcp_bw")
    # authentic, but not a certification: verify refuses it unless the policy accepts no-pair
    result = certificate.verify(cert, pub(key), host="gpu-a01", now=NOW)
    assert not result.ok and result.refused_partial
    assert "BW-005, BW-006 not proven (no-pair)" in result.reason
    assert "gpuboot_accept_partial is not set" in result.reason
    other = certificate.verify(cert, pub(key), host="gpu-a01", accepts=("mig",), now=NOW)
    assert not other.ok and "does not accept no-pair" in other.reason
    accepted = certificate.verify(cert, pub(key), host="gpu-a01", accepts=("no-pair",), now=NOW)
    assert accepted.ok and "accepted by its policy" in accepted.reason


def test_probes_none_is_partial_and_names_the_level(tmp_path, key):
    bundle = make_bundle(tmp_path, ["gpu-a01"], level="none")
    skip = ("SKIPPED", "not applicable: probe level none: not run")
    node = node_report(**{r.replace("-", "_"): skip for r in PROBE_RULES})
    cert = certificate.issue(NodeReport.from_dict(node), bundle, key, now=NOW)
    assert cert["scope"] == "partial" and cert["probes"] == "none"
    missing = [m["check"] for m in cert["missing"]]
    assert missing == ["probes", *sorted(PROBE_RULES)]
    assert {m["gap"] for m in cert["missing"]} == {"no-probes"}


def test_a_rule_left_out_of_the_run_leaves_the_certificate_partial(tmp_path, key):
    bundle = make_bundle(tmp_path, ["gpu-a01"])
    node = node_report()
    node["findings"] = [f for f in node["findings"] if f["rule"] != "NIC-002"]
    cert = certificate.issue(NodeReport.from_dict(node), bundle, key, now=NOW)
    gap = {"check": "NIC-002", "reason": "not evaluated in this run", "gap": "unproven"}
    assert cert["missing"] == [gap]
    every = tuple(extent.GAP_SCOPES)  # no policy accepts what no scope explains
    result = certificate.verify(cert, pub(key), host="gpu-a01", accepts=every, now=NOW)
    assert not result.ok and result.refused_partial and "certify the node again" in result.reason


def test_a_part_the_sku_lacks_needs_no_probe(tmp_path, key):
    profile = yaml.safe_load((PROFILE_DIR / "l40s-pcie-4gpu.yaml").read_text())
    profile["name"] = "one-gpu-no-nic"
    gpu = profile["hardware"]["gpu"]
    gpu["count"] = 1
    for field in ("pci_bus_ids", "numa_nodes"):  # per-GPU lists
        gpu[field] = gpu[field][:1]
    profile["hardware"]["nics"] = []
    bundle = make_bundle(tmp_path, ["gpu-a01"], meta={"profile": "one-gpu-no-nic.yaml"})
    (bundle / "gpu-a01" / "one-gpu-no-nic.yaml").write_text(yaml.safe_dump(profile))
    write_manifest(bundle)
    sku = ("SKIPPED", "not applicable: no such part on this SKU")
    node = node_report(BW_003=sku, BW_004=sku, BW_005=sku)
    cert = certificate.issue(NodeReport.from_dict(node), bundle, key, now=NOW)
    assert (cert["scope"], cert["missing"]) == ("full", [])
    assert cert["required"] == ["BW-001", "BW-002", "BW-006", "DCG-001"]


def _gate_report(tmp_path: Path, key: Path, node: dict[str, Any]) -> dict[str, Any]:
    bundle = make_bundle(tmp_path, [node["host"]], meta=NO_PARTNER)
    cert = certificate.issue(NodeReport.from_dict(node), bundle, key, now=NOW)
    path = certificate.write(cert, tmp_path / "certs" / f"{node['host']}.json")
    return {"bundle": str(bundle), "reports": {f"certificate:{node['host']}": str(path)}}


def _gated(report: dict[str, Any]) -> dict[str, Any]:
    """decide()'s node, bundle and certificate of a one-node report."""
    (node,) = RunReport.from_dict(report).nodes
    path = report["reports"][f"certificate:{node.host}"]
    return {"node": node, "bundle": Path(report["bundle"]), "certificate": path}


def test_join_gate_refuses_a_partial_certificate_by_default(tmp_path, key):
    node = single_node_run()
    report = {**_gate_report(tmp_path, key, node), "nodes": [node]}
    target = decide(**_gated(report), allow_warn=False, now=NOW)
    assert not target.certified and "partial" in (target.error or "")
    assert "BW-005" in target.error and "uncertified taint stays" in target.error
    allowed = decide(**_gated(report), allow_warn=False, accepts=("no-pair",), now=NOW)
    assert allowed.certified and allowed.error is None


def test_join_gate_accepts_a_full_certificate(tmp_path, key):
    node = node_report()
    report = {**_gate_report(tmp_path, key, node), "nodes": [node]}
    target = decide(**_gated(report), allow_warn=False, now=NOW)
    assert target.certified and target.error is None


def test_gate_keeps_the_taint_of_a_partial_certificate_unless_allowed(tmp_path, key):
    pytest.importorskip("kubernetes")
    from gpuboot.k8s import apply_gate
    from gpuboot_lab.kubeapi import FakeApiServer
    from gpuboot_lab.kubeapi import node as api_node
    from tests.unit.k8s.conftest import gate_args

    taint = {"key": "gpuboot.io/uncertified", "value": "true", "effect": "NoSchedule"}
    node = single_node_run()
    report = {**_gate_report(tmp_path, key, node), "nodes": [node]}
    server = FakeApiServer().start()
    try:
        server.add(api_node("gpu-a01", taints=[dict(taint)]))
        kubeconfig = str(server.write_kubeconfig(tmp_path / "kubeconfig"))
        run, certs = gate_args(report)
        (refused,) = apply_gate(run, certificates=certs, kubeconfig=kubeconfig, now=NOW)
        assert "partial" in (refused.error or "")
        assert taint in server.nodes["gpu-a01"]["spec"]["taints"]
        (allowed,) = apply_gate(
            run,
            certificates=certs,
            kubeconfig=kubeconfig,
            now=NOW,
            accept_partial={"gpu-a01": ("no-pair",)},
        )
        assert allowed.error is None
        assert taint not in server.nodes["gpu-a01"]["spec"]["taints"]
    finally:
        server.stop()


def test_verify_refuses_the_certificate_of_another_host(tmp_path, key):
    bundle = make_bundle(tmp_path, ["gpu-a01"])
    cert = certificate.issue(NodeReport.from_dict(node_report()), bundle, key, now=NOW)
    result = certificate.verify(cert, pub(key), host="gpu-a02", now=NOW)
    assert not result.ok
    assert result.reason == "certificate is for host 'gpu-a01', not 'gpu-a02'"


def _swap_gpu_serial(bundle: Path) -> None:
    q = bundle / "gpu-a01" / "nvidia-smi_-q.txt"
    q.write_text(q.read_text().replace("1655022005478", "1655022009999", 1))
    write_manifest(bundle)


def test_verify_against_a_bundle_refuses_other_hardware(tmp_path, key):
    cert = certificate.issue(
        NodeReport.from_dict(node_report()), make_bundle(tmp_path / "a", ["gpu-a01"]), key, now=NOW
    )
    same = make_bundle(tmp_path / "b", ["gpu-a01"])  # a later collection of the same node
    ok = certificate.verify(cert, pub(key), host="gpu-a01", bundle=same, now=NOW)
    assert ok.ok, ok.reason
    swapped = make_bundle(tmp_path / "c", ["gpu-a01"])
    _swap_gpu_serial(swapped)
    bad = certificate.verify(cert, pub(key), host="gpu-a01", bundle=swapped, now=NOW)
    assert not bad.ok and "hardware differs" in bad.reason
    assert "1655022005478" in bad.reason and "1655022009999" in bad.reason


def test_verify_against_a_bundle_without_that_host_is_bad_input(tmp_path, key):
    cert = certificate.issue(
        NodeReport.from_dict(node_report()), make_bundle(tmp_path / "a", ["gpu-a01"]), key, now=NOW
    )
    other = make_bundle(tmp_path / "b", ["gpu-a02"])
    with pytest.raises(BadInput, match="no evidence for host 'gpu-a01'"):
        certificate.verify(cert, pub(key), host="gpu-a01", bundle=other, now=NOW)


def test_validity_has_a_maximum_at_issue_and_at_verify(tmp_path, key, monkeypatch):
    assert certificate.DEFAULT_VALIDITY_DAYS == 30 and certificate.MAX_VALIDITY_DAYS == 365
    bundle = make_bundle(tmp_path, ["gpu-a01"])
    with pytest.raises(BadInput, match="365"):
        certificate.issue(
            NodeReport.from_dict(node_report()), bundle, key, validity_days=366, now=NOW
        )
    monkeypatch.setattr(certificate, "MAX_VALIDITY_DAYS", 5000)  # an issuer without the cap
    long = certificate.issue(
        NodeReport.from_dict(node_report()), bundle, key, validity_days=3650, now=NOW
    )
    monkeypatch.undo()
    result = certificate.verify(long, pub(key), host="gpu-a01", now=NOW + timedelta(days=1))
    assert not result.ok and "3650 days" in result.reason and "365" in result.reason


def gpuboot(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpuboot.cli", *args], capture_output=True, text=True, timeout=60
    )


def test_cli_verify_names_its_host_and_refuses_a_mismatch(tmp_path, key):
    bundle = make_bundle(tmp_path, ["gpu-a01"])
    cert = certificate.write(
        certificate.issue(NodeReport.from_dict(node_report()), bundle, key), tmp_path / "c.json"
    )
    no_host = gpuboot("certify", "--verify", str(cert), "--pubkey", str(pub(key)))
    assert no_host.returncode == 2 and "--host" in no_host.stderr
    other = gpuboot(
        "certify", "--verify", str(cert), "--pubkey", str(pub(key)), "--host", "gpu-a02"
    )
    assert other.returncode == 1 and "not 'gpu-a02'" in other.stdout
    args = ("certify", "--verify", str(cert), "--pubkey", str(pub(key)), "--host", "gpu-a01")
    ok = gpuboot(*args, "--bundle", str(bundle), "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["ok"] is True and doc["host"] == "gpu-a01" and doc["scope"] == "full"


def test_cli_refuses_a_validity_over_the_maximum_before_any_host(tmp_path):
    inventory = tmp_path / "site.yml"  # a host no test can reach: the flag is refused first
    inventory.write_text("all:\n  hosts:\n    node1:\n      ansible_host: 192.0.2.1\n")
    proc = gpuboot("certify", "-i", str(inventory), "--cert-validity-days", "400")
    assert proc.returncode == 2
    assert "--cert-validity-days" in proc.stderr and "365" in proc.stderr


def _swap_nic_slots(bundle: Path, a: str, b: str) -> None:
    """Two NICs trade PCIe slots: names and GUIDs stay, the GPUs beside them change."""
    topo = next((bundle / "gpu-a01").glob("nvidia-smi_topo_-m*"))
    text = topo.read_text()
    text = text.replace(f": {a}\n", ": SWAP\n").replace(f": {b}\n", f": {a}\n")
    topo.write_text(text.replace(": SWAP\n", f": {b}\n"))
    write_manifest(bundle)


def test_verify_against_a_bundle_refuses_nics_that_swapped_slots(tmp_path, key):
    cert = certificate.issue(
        NodeReport.from_dict(node_report()), make_bundle(tmp_path / "a", ["gpu-a01"]), key, now=NOW
    )
    swapped = make_bundle(tmp_path / "b", ["gpu-a01"])
    _swap_nic_slots(swapped, "mlx5_0", "mlx5_2")
    bad = certificate.verify(cert, pub(key), host="gpu-a01", bundle=swapped, now=NOW)
    assert not bad.ok and "hardware differs" in bad.reason
    assert "GPU0 to mlx5_0: certified 'PIX', now 'NODE'" in bad.reason


def _edit_and_rehash(bundle: Path) -> None:
    """An editor changes a GPU's serial, recomputes the manifest's checksums and keeps
    whatever else it says (its seal included)."""
    doc = json.loads((bundle / "MANIFEST.json").read_text())
    _swap_gpu_serial(bundle)  # writes a fresh manifest: its checksums are all that is kept
    doc["files"] = json.loads((bundle / "MANIFEST.json").read_text())["files"]
    (bundle / "MANIFEST.json").write_text(json.dumps(doc))


def test_the_fingerprint_reads_only_the_files_the_manifest_lists(tmp_path):
    from gpuboot.report.fingerprint import host_fingerprint

    host_dir = make_bundle(tmp_path, ["gpu-a01"]) / "gpu-a01"
    assert host_fingerprint(host_dir)["gpus"]
    assert "gpus" not in host_fingerprint(host_dir, ["ibstat.txt", "meta.json"])


def test_a_sealed_bundle_edited_and_rehashed_fails_verify_and_evaluate(tmp_path, key):
    from gpuboot.certify import evaluate_bundle
    from gpuboot.report.seal import seal

    bundle = make_bundle(tmp_path / "a", ["gpu-a01", "gpu-a02"])
    seal(bundle, certificate.load_private_key(key))
    cert = certificate.issue(NodeReport.from_dict(node_report()), bundle, key, now=NOW)
    ok = certificate.verify(cert, pub(key), host="gpu-a01", bundle=bundle, now=NOW)
    assert ok.ok, ok.reason
    sealed = evaluate_bundle(str(bundle), pubkey=str(pub(key)))
    assert sealed.manifest.startswith("verified: sealed with the given key")
    assert "bundle manifest" not in json.dumps(sealed.to_dict())
    _edit_and_rehash(bundle)
    bad = certificate.verify(cert, pub(key), host="gpu-a01", bundle=bundle, now=NOW)
    assert not bad.ok and bad.reason == "bundle manifest signature does not match the content"
    judged = evaluate_bundle(str(bundle), pubkey=str(pub(key)))
    assert {n.verdict for n in judged.nodes} == {"ERROR"}
    assert "signature does not match" in judged.manifest


def test_a_host_directory_cloned_under_a_sealed_manifest_is_refused(tmp_path, key):
    """A host's files copied over another host's, the manifest re-hashed and its identities
    copied too: the signature no longer holds. The identities alone bind each directory."""
    import shutil

    from gpuboot.report.seal import seal, seal_problem

    bundle = make_bundle(tmp_path / "a", ["gpu-a01", "gpu-a02"])
    _swap_gpu_serial(bundle)  # gpu-a01 and gpu-a02 now show different hardware
    seal(bundle, certificate.load_private_key(key))
    public = certificate.load_public_key(pub(key))
    assert seal_problem(bundle, public, "gpu-a02") is None
    for name in ("nvidia-smi_-q.txt",):
        shutil.copyfile(bundle / "gpu-a01" / name, bundle / "gpu-a02" / name)
    assert seal_problem(bundle, public, "gpu-a02") == (
        "bundle manifest does not bind gpu-a02's directory to the hardware it shows"
    )


def test_an_unsigned_manifest_says_so_and_fails_a_check_with_a_key(tmp_path, key):
    from gpuboot.certify import evaluate_bundle

    bundle = make_bundle(tmp_path / "a", ["gpu-a01"])
    plain = evaluate_bundle(str(bundle))
    assert "unsigned (file checksums only" in plain.manifest
    keyed = evaluate_bundle(str(bundle), pubkey=str(pub(key)))
    assert {n.verdict for n in keyed.nodes} == {"ERROR"}
    assert keyed.manifest.startswith("bundle manifest unsigned")


def test_a_rail_the_run_did_not_measure_leaves_the_certificate_partial(tmp_path, key):
    """Probe level quick measures the first rail only: a rail at half bandwidth elsewhere
    would pass unseen, so such a certificate is partial, naming the rails not measured."""
    from .sample import IB_WRITE_BW, PROBE_FILES

    quick = {k: v for k, v in PROBE_FILES.items() if "ib_write_bw" not in k}
    quick["ib_write_bw_-d_mlx5_0_gpu-b01.txt"] = IB_WRITE_BW
    bundle = make_bundle(tmp_path, ["gpu-a01"], probes=quick, level="quick")
    cert = certificate.issue(NodeReport.from_dict(node_report()), bundle, key, now=NOW)
    assert cert["scope"] == "partial"
    [gap] = [m for m in cert["missing"] if m["check"] == "BW-005"]
    assert gap["gap"] == "quick-probes"
    assert cert["measured"]["rails"]["measured"] == ["mlx5_0"]
    assert len(cert["measured"]["rails"]["profile"]) == 8
    assert gap["reason"].startswith("rails mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6")
    assert "--probes full" in gap["reason"]
    every = make_bundle(tmp_path / "full", ["gpu-a01"], level="full")
    assert (
        certificate.issue(NodeReport.from_dict(node_report()), every, key, now=NOW)["scope"]
        == "full"
    )


# A MIG node as certify records it: its stack provides every tool, its layout splits GPU 0
# into seven slices and keeps the other GPUs whole.
MIG_PINS = {
    "gpuboot_profile": "hgx-h100-sxm-8gpu",
    "cuda_toolkit_version": "12.8.1-1",
    "dcgm_version": "1:4.2.3-1",
    "doca_ofed_enabled": True,
    "nvidia_mig_layout": [["1g.10gb"] * 7] + [[]] * 7,
}
MIG_SKIP = "not applicable: MIG enabled on GPU 0 by the host's layout: whole-GPU bandwidth is not measurable; certify with MIG off to measure it"  # noqa: E501
DCGM_MIG_SKIP = "not applicable: the host's MIG layout splits a GPU and dcgmi diag refuses such a MIG configuration, so it was not run; certify with MIG off to run it"  # noqa: E501


def test_a_mig_node_lacks_the_whole_gpu_probes_and_dcgm_and_its_policy_can_accept_that(
    tmp_path, key
):
    """What a MIG node's certificate lacks today: nvbandwidth and all_reduce_perf (CUDA sees
    slices, not boards) and dcgmi diag (refused for a split GPU); the pair probes run. A
    group's `gpuboot_accept_partial: [mig]` accepts exactly that, nothing more."""
    bundle = make_bundle(tmp_path, ["gpu-a01"], level="full", meta={"pins": MIG_PINS})
    skip = ("SKIPPED", MIG_SKIP)
    node = node_report(
        BW_001=skip, BW_002=skip, BW_003=skip, BW_004=skip, DCG_001=("SKIPPED", DCGM_MIG_SKIP)
    )
    cert = certificate.issue(NodeReport.from_dict(node), bundle, key, now=NOW)
    assert [(m["check"], m["gap"]) for m in cert["missing"]] == [
        ("BW-001", "mig"),
        ("BW-002", "mig"),
        ("BW-003", "mig"),
        ("BW-004", "mig"),
        ("DCG-001", "mig"),
    ]
    assert cert["measured"]["gpus"] == {"measured": 0, "profile": 8}
    assert certificate.verify(cert, pub(key), host="gpu-a01", accepts=("mig",), now=NOW).ok
    refused = certificate.verify(cert, pub(key), host="gpu-a01", accepts=("no-pair",), now=NOW)
    assert refused.refused_partial and "does not accept mig" in refused.reason
    # the same node certified alone: the pair gap is a second scope the policy must name
    alone = make_bundle(
        tmp_path / "alone", ["gpu-a01"], level="full", meta={"pins": MIG_PINS, **NO_PARTNER}
    )
    pairless = {**node, "findings": [dict(f) for f in node["findings"]]}
    for f in pairless["findings"]:
        if f["rule"] in ("BW-005", "BW-006"):
            f.update(status="SKIPPED", reason="not applicable: no partner node in this run")
    cert = certificate.issue(NodeReport.from_dict(pairless), alone, key, now=NOW)
    assert {m["gap"] for m in cert["missing"]} == {"mig", "no-pair"}
    only_mig = certificate.verify(cert, pub(key), host="gpu-a01", accepts=("mig",), now=NOW)
    assert not only_mig.ok and "does not accept no-pair" in only_mig.reason
    both = ("mig", "no-pair")
    assert certificate.verify(cert, pub(key), host="gpu-a01", accepts=both, now=NOW).ok


def test_a_stack_without_the_probe_tools_is_partial_for_no_tool(tmp_path, key):
    """A driver-only host (no CUDA, DCGM or DOCA-OFED pinned) runs none of those probes:
    its gaps are no-tool, which a site may accept for such nodes."""
    bundle = make_bundle(tmp_path, ["gpu-a01"], level="quick")  # pins: the profile only

    def skip(tool: str, var: str) -> tuple[str, str]:
        return (
            "SKIPPED",
            f"not applicable: the host's stack does not provide {tool} ({var} unset)",
        )

    cuda = skip("nvbandwidth", "cuda_toolkit_version")
    node = node_report(
        BW_001=cuda, BW_002=cuda, BW_003=cuda, BW_004=cuda,
        DCG_001=skip("dcgmi diag", "dcgm_version"),
        BW_005=skip("ib_write_bw", "doca_ofed_enabled"),
    )  # fmt: skip
    cert = certificate.issue(NodeReport.from_dict(node), bundle, key, now=NOW)
    assert {m["check"]: m["gap"] for m in cert["missing"]} == dict.fromkeys(
        ["BW-001", "BW-002", "BW-003", "BW-004", "BW-005", "DCG-001"], "no-tool"
    )
    assert certificate.verify(cert, pub(key), host="gpu-a01", accepts=("no-tool",), now=NOW).ok
