"""JUnit XML: structure and counts that CI dashboards (Jenkins, GitLab) rely on."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from gpuboot.report import junit
from gpuboot.results import RunReport


def _suites(report) -> dict[str, ET.Element]:
    root = ET.fromstring(junit.render(RunReport.from_dict(report)))
    assert root.tag == "testsuites"
    return {s.get("name"): s for s in root.findall("testsuite")}


def test_one_suite_per_node_one_case_per_rule_and_measurement(report):
    suites = _suites(report)
    assert list(suites) == [n["host"] for n in report["nodes"]]
    for node in report["nodes"]:
        suite = suites[node["host"]]
        cases = suite.findall("testcase")
        assert len(cases) == len(node["findings"]) + len(node["measurements"]) == 10
        assert suite.get("tests") == "10"
        assert {c.get("classname") for c in cases} == {node["host"]}
        assert cases[0].get("name") == "STK-001 driver userspace and kernel module match the pin"
        assert cases[-1].get("name") == "measurement ib_write_bw mlx5_0"
        assert suite.find("properties/property[@name='verdict']").get("value") == node["verdict"]


def test_pass_node_has_no_failures():
    report = {
        "run_id": "r",
        "nodes": [
            {
                "host": "h",
                "verdict": "PASS",
                "findings": [
                    {
                        "rule": "GPU-001",
                        "title": "t",
                        "status": "PASS",
                        "reason": "ok",
                        "action": "",
                    }
                ],
            }
        ],
    }
    root = ET.fromstring(junit.render(RunReport.from_dict(report)))
    case = root.find("testsuite/testcase")
    assert list(case) == []
    assert root.get("tests") == "1" and root.get("failures") == "0" and root.get("errors") == "0"


def test_fail_becomes_failure_with_reason_and_action(report):
    suite = _suites(report)["gpu-b07.rack2.example.net"]
    assert suite.get("failures") == "5"  # 2 rules + 3 measurements below their fail band
    assert suite.get("errors") == "0"
    case = suite.find("testcase[@name='NVL-001 all NVLink links up at the expected speed']")
    failure = case.find("failure")
    assert failure.get("message") == "GPU 5: 12 of 18 NVLink links inactive (links 6-17)"
    assert failure.get("type") == "FAIL"
    assert "action: reseat the GPU baseboard" in failure.text
    m = suite.find("testcase[@name='measurement nvbandwidth host_to_device_memcpy_ce']/failure")
    assert m.get("message") == (
        "nvbandwidth host_to_device_memcpy_ce = 12.4 GB/s, below the fail threshold 40 GB/s"
    )
    assert "physical limit 63 GB/s" in m.text and "median of 5 samples" in m.text


def test_error_becomes_error_not_failure(report):
    suite = _suites(report)["gpu-c11"]
    assert suite.get("errors") == "5" and suite.get("failures") == "0"
    case = suite.find("testcase[@name='STK-001 driver userspace and kernel module match the pin']")
    assert case.find("failure") is None
    assert case.find("error").get("message").startswith("cannot judge: nvbandwidth")
    m = suite.find("testcase[@name='measurement ib_write_bw mlx5_0']/error")
    assert m.get("message") == "ib_write_bw mlx5_0: not measured"


def test_warn_passes_with_system_out(report):
    suite = _suites(report)["gpu-a03"]
    assert suite.get("failures") == "0" and suite.get("errors") == "0"
    case = suite.find("testcase[@name='GPU-002 persistence mode enabled on every GPU']")
    assert case.find("failure") is None and case.find("error") is None
    assert case.find("system-out").text.startswith("WARN: persistence mode disabled on GPU 3")


def test_totals_on_testsuites(report):
    root = ET.fromstring(junit.render(RunReport.from_dict(report)))
    assert root.get("tests") == "50"
    assert root.get("failures") == "5" and root.get("errors") == "5"
    assert root.get("time") == "184.27"
    for suite in root.findall("testsuite"):
        for attr in ("name", "tests", "failures", "errors", "skipped", "time"):
            assert suite.get(attr) is not None, attr
        for case in suite.findall("testcase"):
            assert case.get("classname") and case.get("name") and case.get("time") is not None


def test_machine_text_is_escaped_and_xml_safe():
    nasty = 'bad <tag> & "quote" \x1b[31mred\x1b[0m \x00'
    report = {
        "nodes": [
            {
                "host": "h<1>",
                "verdict": "FAIL",
                "findings": [
                    {
                        "rule": "X-1",
                        "title": "t&t",
                        "status": "FAIL",
                        "reason": nasty,
                        "action": "a<b",
                    }
                ],
            }
        ]
    }
    data = junit.render(RunReport.from_dict(report))
    root = ET.fromstring(data)  # parses: no raw control characters, entities escaped
    failure = root.find("testsuite/testcase/failure")
    assert failure.get("message").startswith('bad <tag> & "quote" \ufffd[31mred')
    assert root.find("testsuite").get("name") == "h<1>"
    assert b"<tag>" not in data


def test_write_is_atomic_file(report, tmp_path):
    path = junit.write(RunReport.from_dict(report), tmp_path / "out" / "junit.xml")
    assert path.read_bytes().startswith(b"<?xml version='1.0' encoding='utf-8'?>")
    assert [p.name for p in path.parent.iterdir()] == ["junit.xml"]  # no temp file left
