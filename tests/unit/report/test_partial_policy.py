"""A partial certification is its own verdict (CLI, --json, HTML, JUnit, metrics, exit 7),
accepted only where the node's gpuboot_accept_partial names every gap; --allow-partial is
gone with an error that names that variable."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from gpuboot.cli.boundary import main
from gpuboot.errors import ConfigError
from gpuboot.report import certificate
from gpuboot.results import NodeReport, RunReport

from .sample import PROBE_FILES, make_bundle
from .test_cert_scope import NO_PARTNER, node_report, single_node_run

INVENTORY = """all:
  hosts:
    gpu-a01:
      ansible_host: 192.0.2.1
      gpuboot_profile: hgx-h100-sxm-8gpu
      nvidia_driver_branch: "570"
      nvidia_driver_version: "570.133.20-1"
{extra}"""


def inventory(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "site.yml"
    path.write_text(INVENTORY.format(extra=extra))
    return path


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _certify(
    tmp_path, monkeypatch, capsys, node: dict[str, Any], extra: str = "", *, sign: bool = True
):
    """`gpuboot certify -i INV --sign-key KEY --json` on a run whose certify step returns
    ``node`` over a real-capture bundle (a node whose pair rules were skipped ran alone: the
    pair phase found no partner and its bundle holds no pair file)."""
    from gpuboot import certify

    alone = any(f["rule"] == "BW-006" and f["status"] == "SKIPPED" for f in node["findings"])
    probes = {k: v for k, v in PROBE_FILES.items() if "ib_write_bw" not in k} if alone else None
    meta = NO_PARTNER if alone else None
    bundle = make_bundle(tmp_path / "runs", ["gpu-a01"], probes=probes, meta=meta)
    run = {"run_id": bundle.name, "run_dir": str(bundle), "bundle": str(bundle), "nodes": [node]}
    monkeypatch.setattr(certify, "certify", lambda *_a, **_k: RunReport.from_dict(run))
    args = ["certify", "-i", str(inventory(tmp_path, extra))]
    if sign:
        args += ["--sign-key", str(certificate.generate_key(tmp_path / "key.pem"))]
    code = main([*args, "--json"])
    out = capsys.readouterr()
    assert code != 3, out.err
    doc = json.loads(out.out)
    code_text = main(args)
    text = capsys.readouterr().out
    assert code == code_text
    return code, doc, text


def test_a_partial_certificate_no_policy_accepts_is_its_own_verdict_and_exit_7(
    tmp_path, monkeypatch, capsys, home
):
    code, doc, text = _certify(tmp_path, monkeypatch, capsys, single_node_run())
    assert code == 7
    (node,) = doc["nodes"]
    assert node["verdict"] == "PASS"  # the rules' verdict; the certification says partial
    cert = node["certification"]
    assert (cert["scope"], cert["certifies"], cert["not_accepted"]) == (
        "partial",
        False,
        ["no-pair"],
    )
    assert [g["check"] for g in cert["gaps"]] == ["BW-005", "BW-006"]
    assert cert["measured"]["probes"] == "quick"
    assert "gpu-a01: PARTIAL, not certified: BW-005 (no-pair)" in text
    assert (
        "measured on gpu-a01: probes quick; 0 repeat(s); no dcgmi diag; GPUs 8/8; rails 0/8; "
        "tcp_bw with no partner; ib_write_bw with no partner"
    ) in text
    assert "does not accept no-pair" in text
    assert "or accept it: gpuboot_accept_partial: [no-pair]" in text
    # the inventory holds no other node to pair with: the command says what it lacks
    assert "--limit gpu-a01 --probes full --sign-key" in text
    assert "a pair probe needs a partner: add a known-good node" in text
    reports = Path(doc["reports"]["html"]).parent
    html = (reports / "report.html").read_text()
    assert "partial: not certified</span> for BW-005, BW-006 not measured (no-pair)" in html
    assert "certified, may join the cluster" not in html
    assert "0 of 1 node certified, 1 partial" in html
    measured = html[html.index("What each run measured") :]
    assert "<td>quick</td>" in measured and "<td>0 of 8</td>" in measured  # no rail measured
    suite = ET.parse(reports / "junit.xml").getroot().find("testsuite")
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert (props["verdict"], props["scope"]) == ("PARTIAL", "partial")
    failure = suite.find("testcase[@name='certification scope']/failure")
    assert failure is not None and failure.get("type") == "PARTIAL"
    assert "not certified for no-pair" in failure.get("message")
    prom = (reports / "gpuboot.prom").read_text()
    assert 'gpuboot_certify_node_certified{host="gpu-a01"} 0' in prom
    assert 'gpuboot_certify_node_partial{host="gpu-a01"} 1' in prom
    assert 'gpuboot_certify_node_gap{host="gpu-a01",gap="no-pair",accepted="false"} 1' in prom


def test_the_nodes_policy_accepts_exactly_the_gaps_it_names(tmp_path, monkeypatch, capsys, home):
    extra = "      gpuboot_accept_partial: [no-pair]\n"
    code, doc, text = _certify(tmp_path, monkeypatch, capsys, single_node_run(), extra)
    assert code == 0
    cert = doc["nodes"][0]["certification"]
    assert (cert["scope"], cert["certifies"], cert["accept_partial"]) == (
        "partial",
        True,
        ["no-pair"],
    )
    assert "gpu-a01: partial, accepted by its gpuboot_accept_partial" in text
    reports = Path(doc["reports"]["html"]).parent
    prom = (reports / "gpuboot.prom").read_text()
    assert 'gpuboot_certify_node_certified{host="gpu-a01"} 1' in prom
    assert 'gpuboot_certify_node_gap{host="gpu-a01",gap="no-pair",accepted="true"} 1' in prom
    suite = ET.parse(reports / "junit.xml").getroot().find("testsuite")
    assert suite.find("testcase[@name='certification scope']/failure") is None


def test_without_a_key_the_run_certifies_nothing_and_says_what_it_measured(
    tmp_path, monkeypatch, capsys, home
):
    """No --sign-key: a check run. Its reports claim no certification either way (no
    PARTIAL, exit 0); its text and --json still say the node's run was partial."""
    code, doc, text = _certify(tmp_path, monkeypatch, capsys, single_node_run(), sign=False)
    assert code == 0 and doc["nodes"][0]["certification"]["scope"] == "partial"
    assert "gpu-a01: partial (no --sign-key: none issued)" in text
    reports = Path(doc["reports"]["html"]).parent
    suite = ET.parse(reports / "junit.xml").getroot().find("testsuite")
    assert suite.find("testcase[@name='certification scope']") is None
    assert "PARTIAL</span>" not in (reports / "report.html").read_text()  # no badge


def test_a_full_run_exits_0_with_scope_full(tmp_path, monkeypatch, capsys, home):
    code, doc, text = _certify(tmp_path, monkeypatch, capsys, node_report())
    assert code == 0 and doc["nodes"][0]["certification"]["scope"] == "full"
    assert "PARTIAL" not in text


@pytest.mark.parametrize(
    "argv",
    [
        ["certify", "-i", "site.yml", "--allow-partial"],
        ["cert", "verify", "c.json", "--allow-partial"],
        ["remediate", "-i", "site.yml", "--limit", "n1", "--allow-partial"],
    ],
)
def test_allow_partial_is_refused_naming_the_inventory_variable(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--allow-partial was removed" in err and "gpuboot_accept_partial" in err


@pytest.mark.parametrize(
    ("value", "said"),
    [("[mig, no-nccl]", "unknown gap 'no-nccl'"), ("mig", "must be a list of gap names")],
)
def test_a_bad_policy_is_refused_at_load_naming_file_host_key_and_names(tmp_path, value, said):
    from gpuboot.inventory import load_inventory

    path = inventory(tmp_path, f"      gpuboot_accept_partial: {value}\n")
    with pytest.raises(ConfigError) as exc:
        load_inventory(path)
    assert said in exc.value.message
    assert exc.value.where == f"{path}: gpu-a01.gpuboot_accept_partial"
    assert "no-probes, quick-probes, no-pair, mig, no-tool" in exc.value.hint


def test_cert_verify_reads_the_hosts_policy_from_the_inventory(tmp_path, capsys, key):
    bundle = make_bundle(tmp_path / "b", ["gpu-a01"], meta=NO_PARTNER)
    cert = certificate.write(
        certificate.issue(
            NodeReport.from_dict(single_node_run()),
            bundle,
            key,
        ),
        tmp_path / "c.json",
    )
    args = ["cert", "verify", str(cert), "--pubkey", f"{key}.pub", "--host", "gpu-a01", "--json"]
    assert main(args) == 7
    refused = json.loads(capsys.readouterr().out)
    assert refused["ok"] is False and refused["accept_partial"] == []
    assert refused["measured"]["rails"]["measured"] == [f"mlx5_{i}" for i in range(8)]
    accepting = inventory(tmp_path, "      gpuboot_accept_partial: [no-pair]\n")
    assert main([*args, "-i", str(accepting)]) == 0
    assert json.loads(capsys.readouterr().out)["accept_partial"] == ["no-pair"]
    assert main([*args[:-1], "-i", str(accepting)]) == 0
    assert "measured: probes quick" in capsys.readouterr().out
