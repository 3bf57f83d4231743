"""evaluate_bundle on bundles built from real published captures (tests/fixtures/bundles,
made by make_bundles.py): every rule gives the status the capture's SOURCES.md row
warrants - including the traps (bridge links idle by design, Xid 13/43, fallen off the bus
without an Xid, idle Gen1, HW slowdown on healthy H100s)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuboot.certify import evaluate_bundle

BUNDLES = Path(__file__).resolve().parents[2] / "fixtures" / "bundles"
CASES = [
    (b.name, h.name, json.loads((h / "meta.json").read_text())["expect"])
    for b in sorted(BUNDLES.iterdir())
    if b.is_dir()
    for h in sorted(b.iterdir())
    if (h / "meta.json").exists()
]


@pytest.fixture(scope="module")
def reports():
    out = {}
    for bundle in {c[0] for c in CASES}:
        # real captures: no certify run wrote them, so no MANIFEST.json vouches for them
        doc = evaluate_bundle(str(BUNDLES / bundle), ignore_manifest=True).to_dict()
        out.update({(bundle, n["host"]): n for n in doc["nodes"]})
    return out


@pytest.mark.parametrize(("bundle", "host", "expect"), CASES, ids=[f"{c[0]}/{c[1]}" for c in CASES])
def test_capture_gets_the_verdict_its_description_warrants(reports, bundle, host, expect):
    node = reports[(bundle, host)]
    got = {f["rule"]: f["status"] for f in node["findings"] if f["rule"] in expect}
    assert got == expect, [f for f in node["findings"] if f["status"] != expect.get(f["rule"])]
    # the bundle carries evidence for these rules only: the others are not judged (SKIPPED
    # where it holds none of their files), and partial evidence never makes the node PASS
    rest = [f for f in node["findings"] if f["rule"] not in expect]
    assert rest and all(
        (f["status"], f["reason"].endswith("not in the bundle"))
        in (("SKIPPED", True), ("ERROR", False))
        and f["reason"].startswith("not judged: ")
        for f in rest
    ), rest
    order = ("FAIL", "ERROR", "WARN", "PASS")
    assert node["verdict"] == next(s for s in order if s in {*expect.values(), "ERROR"})


def test_traps_are_explained(reports):
    def finding(bundle, host, rule):
        node = reports[(bundle, host)]
        return next(f for f in node["findings"] if f["rule"] == rule)

    assert "power saving" in finding("real-pcie-ecc", "l40s-idle-gen1", "PCI-001")["reason"]
    assert "Xid 79" in finding("real-xid", "b200-fallen-off-bus-no-xid", "XID-001")["reason"]
    assert "Xid 119" in finding("real-xid", "xid119-gsp-timeout", "XID-001")["action"]
    bridge = finding("real-nvlink", "h100-pcie-bridge", "NVL-001")
    assert bridge["reason"].startswith("12 link(s) per GPU")
    assert (
        "4,5,10,11,16,17"
        in finding("real-nvlink", "h100-pcie-bridge-naive-profile", "NVL-001")["reason"]
    )
    mig = finding("real-h100-healthy", "h200-mig-under-load", "NVL-001")
    assert "MIG mode" in mig["reason"]


def test_measurements_carry_band_margin_and_limit(reports):
    node = reports[("real-bandwidth", "h200-one-shared-nic-busbw92")]
    (m,) = node["measurements"]
    assert m["rule"] == "BW-004" and m["unit"] == "GB/s" and m["status"] == "FAIL"
    assert m["margin"] < 0 and m["fail_below"] == pytest.approx(465 * 0.8)
    ib = reports[("real-bandwidth", "ib-200g-197gbps")]["measurements"][0]
    assert ib["unit"] == "Gb/s" and ib["pct_of_limit"] == pytest.approx(98.9, abs=0.1)
