"""Every real capture in tests/fixtures/captures gets the verdict its source warrants (issue 15
acceptance), judged by `gpuboot evaluate` the way a bundle of real tool outputs is: each file
named after the command that printed it, in whichever form it was printed (text or JSON, dmesg
or journalctl -k or syslog, nvidia-smi or its -a/-q -d variants, ibstat/ibstatus/ibv_devinfo),
and meta.json naming no rules: evaluate finds them from the files. The table is
tests/fixtures/captures/verdicts.yaml."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from gpuboot.certify import evaluate_bundle
from gpuboot.evidence._common import has_elision

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CAPTURES = FIXTURES / "captures"
TABLE = yaml.safe_load((CAPTURES / "verdicts.yaml").read_text())["cases"]


def _host(i: int, case: dict) -> str:
    stem = re.sub(r"[^a-z0-9]+", "-", Path(case["capture"]).stem.lower())[:60]
    return f"c{i:02d}-{stem}"


@pytest.fixture(scope="module")
def judged(tmp_path_factory) -> dict[str, dict]:
    """One bundle of every case, judged once (one host directory per case)."""
    root = tmp_path_factory.mktemp("captures-bundle")
    for i, case in enumerate(TABLE):
        d = root / _host(i, case)
        d.mkdir()
        text = (CAPTURES / case["capture"]).read_bytes()
        (d / case["as"]).write_bytes(text)
        profile = case["profile"]
        if profile.startswith("file:"):
            src = FIXTURES / profile.removeprefix("file:")
            shutil.copyfile(src, d / src.name)
            profile = src.name
        meta = {"host": d.name, "profile": profile, "pins": case.get("pins") or {}}
        if has_elision(text.decode(errors="replace")):
            meta["excerpt"] = True  # a published excerpt: "[...]" is the author's
        (d / "meta.json").write_text(json.dumps(meta))
    doc = evaluate_bundle(str(root), ignore_manifest=True).to_dict()
    return {n["host"]: n for n in doc["nodes"]}


@pytest.mark.parametrize("i", range(len(TABLE)), ids=[f"{c['capture']}->{c['as']}" for c in TABLE])
def test_capture_gets_its_verdict(judged, i):
    case = TABLE[i]
    node = judged[_host(i, case)]
    got = {f["rule"]: f for f in node["findings"]}
    status = {rule: got[rule]["status"] for rule in case["expect"]}
    assert status == case["expect"], [got[r] for r in case["expect"]]
    if says := case.get("says"):
        first = next(iter(case["expect"]))
        assert says in got[first]["reason"], got[first]
    # a bundle of one tool's output never certifies the node: rules it holds no evidence
    # for are not judged (SKIPPED: not in the bundle), and the node is not PASS
    assert node["verdict"] != "PASS"
    untouched = [f for f in node["findings"] if f["rule"] in ("STK-001", "MOD-001")]
    assert all(
        f["status"] == "SKIPPED" and "not in the bundle" in f["reason"] for f in untouched
    ), untouched


def test_every_capture_file_is_judged_or_named_as_not_judged_alone():
    """The table covers every capture but those its footer names (another rule's input)."""
    listed = {c["capture"] for c in TABLE}
    footer = (CAPTURES / "verdicts.yaml").read_text().split("Captures no rule judges alone")[1]
    # other features' captures (packages, PCI bus), read by rules with their own tests
    skipped_dirs = ("topo_m/", "mig_lgi/", "mig_lgip/", "dpkg/", "dnf/", "rpm/", "lspci/")
    skipped_files = ("a100-oci-2node-16gpu-roce-10GB-single-size", "azure-hdr200-plus-eth-an0")
    assert all(d.rstrip("/") in footer for d in skipped_dirs[:4])
    files = [
        p.relative_to(CAPTURES).as_posix()
        for p in CAPTURES.rglob("*")
        if p.is_file() and p.suffix in (".txt", ".json", ".log") and "SOURCES" not in p.name
    ]
    missing = [
        f
        for f in files
        if f not in listed
        and not f.startswith(skipped_dirs)
        and not any(s in f for s in skipped_files)
    ]
    assert missing == []
