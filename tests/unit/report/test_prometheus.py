"""Prometheus textfile: parsed line by line against the text exposition format."""

from __future__ import annotations

import os
import re
import stat

import pytest

from gpuboot.report import prometheus
from gpuboot.results import RunReport

from .conftest import NOW

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL_VALUE = r'"(?:[^"\\\n]|\\\\|\\"|\\n)*"'
SAMPLE = re.compile(
    rf"^(?P<name>{NAME})"
    rf"(?:\{{(?P<labels>[a-zA-Z_][a-zA-Z0-9_]*={LABEL_VALUE}"
    rf"(?:,[a-zA-Z_][a-zA-Z0-9_]*={LABEL_VALUE})*)\}})?"
    r" (?P<value>[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|NaN|Inf))$"
)
LABEL = re.compile(rf"([a-zA-Z_][a-zA-Z0-9_]*)=({LABEL_VALUE})")


def _unescape(v: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), v[1:-1])


def parse(text: str) -> dict[str, dict]:
    """Strict reader: HELP then TYPE before a family's samples, families contiguous,
    no duplicate series, newline-terminated."""
    assert text.endswith("\n")
    families: dict[str, dict] = {}
    current = None
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            assert name not in families, f"line {n}: family {name} declared twice"
            families[name] = {"help": line.split(" ", 3)[3], "type": None, "samples": {}}
            current = name
        elif line.startswith("# TYPE "):
            _h, _t, name, kind = line.split(" ")
            assert name == current and kind in ("gauge", "counter", "untyped"), line
            families[name]["type"] = kind
        else:
            m = SAMPLE.match(line)
            assert m, f"line {n} is not a valid sample: {line!r}"
            assert m.group("name") == current, f"line {n}: sample outside its family"
            assert families[current]["type"], f"line {n}: sample before TYPE"
            labels = tuple((k, _unescape(v)) for k, v in LABEL.findall(m.group("labels") or ""))
            series = families[current]["samples"]
            assert labels not in series, f"line {n}: duplicate series"
            series[labels] = float(m.group("value"))
    return families


@pytest.fixture
def certs():
    full = {"scope": "full", "missing": []}
    return {"gpu-a01": {"verdict": "PASS", "expires_at": "2026-12-22T10:20:00Z", **full}}


def test_valid_exposition_with_help_and_type(report, certs):
    fam = parse(prometheus.render(RunReport.from_dict(report), certs, now=NOW))
    assert set(fam) == {
        "gpuboot_certify_node_certified",
        "gpuboot_certify_node_partial",  # empty without extents: declared, no sample
        "gpuboot_certify_node_gap",
        "gpuboot_certify_node_verdict",
        "gpuboot_certify_rule_status",
        "gpuboot_certify_bandwidth_bytes_per_second",
        "gpuboot_certify_certificate_expiry_timestamp_seconds",
        "gpuboot_certify_last_run_timestamp_seconds",
    }
    assert all(f["type"] == "gauge" and f["help"] for f in fam.values())


def test_values(report, certs):
    fam = parse(prometheus.render(RunReport.from_dict(report), certs, now=NOW))
    certified = fam["gpuboot_certify_node_certified"]["samples"]
    assert certified[(("host", "gpu-a01"),)] == 1
    assert certified[(("host", "gpu-a02"),)] == 0  # passed, but no certificate given
    assert certified[(("host", "gpu-c11"),)] == 0
    rules = fam["gpuboot_certify_rule_status"]["samples"]
    key = (("host", "gpu-b07.rack2.example.net"), ("rule", "NVL-001"))
    assert rules[(*key, ("status", "FAIL"))] == 1
    assert rules[(*key, ("status", "PASS"))] == 0
    assert len(rules) == 5 * 6 * 5  # every status (SKIPPED too) of every rule: never vanish
    meas = fam["gpuboot_certify_bandwidth_bytes_per_second"]["samples"]  # Gb/s: bytes/s too
    assert meas[(("host", "gpu-a01"), ("figure", "ib_write_bw mlx5_0"))] == 392.1e9 / 8
    assert not any(dict(k)["host"] == "gpu-c11" for k in meas)  # not measured: no fake 0
    expiry = fam["gpuboot_certify_certificate_expiry_timestamp_seconds"]["samples"]
    assert expiry == {(("host", "gpu-a01"),): 1797934800.0}
    assert fam["gpuboot_certify_last_run_timestamp_seconds"]["samples"][()] == NOW.timestamp()


def test_label_values_are_escaped():
    report = {
        "nodes": [
            {
                "host": 'we"ird\\host\nx',
                "verdict": "PASS",
                "findings": [],
                "measurements": [{"name": "a", "value": 1.5, "unit": "GB/s"}],
            }
        ]
    }
    fam = parse(prometheus.render(RunReport.from_dict(report), now=NOW))
    assert fam["gpuboot_certify_node_certified"]["samples"] == {(("host", 'we"ird\\host\nx'),): 0}


def test_write_is_atomic_and_world_readable(report, tmp_path):
    target = tmp_path / "textfile" / "gpuboot.prom"
    target.parent.mkdir()
    target.write_text("old\n")
    path = prometheus.write(RunReport.from_dict(report), target, now=NOW)
    assert path == target and path.read_text().startswith("# HELP gpuboot_certify_node_certified")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644  # node_exporter runs as another user
    assert os.listdir(target.parent) == ["gpuboot.prom"]  # temp file renamed, not left behind
