from __future__ import annotations

import pytest

from gpuboot.errors import ParseError
from gpuboot.evidence.nvidia_smi_table import (
    NO_DEVICES,
    NO_DRIVER,
    NOT_FOUND,
    parse_nvidia_smi_table,
)

D = "nvidia_smi_table/"


def test_err_field_names_the_gpu_and_the_field(read):
    t = parse_nvidia_smi_table(read(D + "rtx4000ada-gpu14-fan-err-excerpt.txt"))
    assert t.elided and t.answer is None
    assert [(g.index, g.bus_id, g.errors) for g in t.gpus] == [
        (13, "00000000:C9:00.0", ()),
        (14, "00000000:CC:00.0", ("fan",)),
    ]
    assert all(g.persistence is True and g.name == "NVIDIA RTX 4000 Ada Gene..." for g in t.gpus)


@pytest.mark.parametrize(
    ("capture", "answer"),
    [
        ("rtx5090-no-devices-were-found-resizable-bar-off.txt", NO_DEVICES),
        ("debian12-couldnt-communicate-with-driver.txt", NO_DRIVER),
    ],
)
def test_the_tools_answer_instead_of_a_table(read, capture, answer):
    t = parse_nvidia_smi_table(read(D + capture))
    assert t.answer == answer and not t.gpus


def test_a_missing_tool_is_its_own_answer():
    assert parse_nvidia_smi_table("bash: nvidia-smi: command not found\n").answer == NOT_FOUND


def test_the_emulators_table_reads_every_gpu():
    """The 535-series layout the lab prints (gpuboot_lab/emulator/emu/smi.py)."""
    row = "|   {i}  NVIDIA H100 80GB HBM3          {pm}  |   00000000:{b}:00.0 Off |  0 |"
    lines = ["| NVIDIA-SMI 535.161.08   Driver Version: 535.161.08   CUDA Version: 12.2 |"]
    for i, b in enumerate(("1B", "43")):
        lines += [
            row.format(i=i, pm="On" if i else "Off", b=b),
            "| N/A   30C    P0   69W /  700W |   0MiB /  81559MiB |   0%   Default |",
        ]
    t = parse_nvidia_smi_table("\n".join(lines))
    assert t.driver_version == "535.161.08" and t.cuda_version == "12.2"
    assert [(g.index, g.persistence) for g in t.gpus] == [(0, False), (1, True)]


def test_text_that_is_no_table_is_unreadable():
    with pytest.raises(ParseError):
        parse_nvidia_smi_table("Mon Aug  5 06:26:21 2024\n+-----+\n")
