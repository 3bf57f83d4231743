from __future__ import annotations

import pytest

from gpuboot.errors import ParseError
from gpuboot.evidence import parser_for
from gpuboot.evidence.nvidia_smi_csv import parse_query_gpu_csv

from .conftest import capture_files


@pytest.mark.parametrize("path", capture_files("nvidia_smi_query_csv"), ids=lambda p: p.name)
def test_every_capture_parses(path):
    result = parse_query_gpu_csv(path.read_text())
    assert result.rows and all(len(r.values) == len(result.fields) for r in result.rows)


def test_l40s_idle_gen1_vs_gen4(read):
    r = parse_query_gpu_csv(read("nvidia_smi_query_csv/l40s-8gpu-pcie-gen-width-idle-gen1.csv.txt"))
    assert [row.index for row in r.rows] == list(range(8))
    for row in r.rows:
        assert (row.pcie_gen_current, row.pcie_gen_max) == (1, 4)
        assert (row.pcie_width_current, row.pcie_width_max) == (16, 16)


def test_h100_full_fields(read):
    r = parse_query_gpu_csv(read("nvidia_smi_query_csv/h100-hbm3-idle-fullfields.csv.txt"))
    (row,) = r.rows
    assert len(r.fields) == 212
    assert r.units["memory.total"] == "MiB" and row.as_int("memory.total") == 81559
    assert row.text("name") == "NVIDIA H100 80GB HBM3"
    assert row.pcie_gen_current == 5 and row.pcie_width_max == 16
    assert row.text("pcie.link.gen.hostmax") is None  # "[N/A]"
    assert row.text("display_mode") is None  # "[Requested functionality has been deprecated]"
    assert row.remap_pending is False and row.remap_failure is False
    assert row.clocks_event_reasons_active_mask == 1  # idle only
    assert row.mig_mode_current is False
    assert row.as_float("power.draw") == 69.85


def test_h200_mig_na_fields(read):
    (row,) = parse_query_gpu_csv(read("nvidia_smi_query_csv/h200-mig-idle-fullfields.csv.txt")).rows
    assert row.mig_mode_current is True
    assert row.remap_pending is None and row.as_int("remapped_rows.correctable") is None
    assert row.text("utilization.gpu") is None


def test_h200_under_load(read):
    (row,) = parse_query_gpu_csv(
        read("nvidia_smi_query_csv/h200-under-load-fullfields.csv.txt")
    ).rows
    assert row.as_float("power.draw") == 627.40
    assert row.as_int("utilization.gpu") == 100
    assert row.clocks_event_reasons_active_mask == 0
    assert row.as_int("ecc.errors.uncorrected.volatile.dram") == 0


def test_noheader_uses_field_list_from_filename():
    name = "nvidia-smi_--query-gpu=index,pcie.link.gen.current_--format=csv,noheader.csv"
    parse = parser_for(name)
    r = parse("0, 4\n1, 1\n")
    assert [row.pcie_gen_current for row in r.rows] == [4, 1]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "index, name\n",
        "0, 1, 4\n",  # no header and no field list
        'Field "bogus" is not a valid field to query.\n',
        "index, pcie.link.gen.current\n0, 1, 2\n",
    ],
)
def test_garbage_raises(text):
    with pytest.raises(ParseError):
        parse_query_gpu_csv(text)
