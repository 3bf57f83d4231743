from __future__ import annotations

import pytest

from gpuboot.errors import ParseError
from gpuboot.evidence.mig import parse_mig_lci, parse_mig_lgi, parse_mig_lgip

from .conftest import capture_files


@pytest.mark.parametrize("path", capture_files("mig_lgip"), ids=lambda p: p.name)
def test_every_lgip_parses(path):
    assert parse_mig_lgip(path.read_text()).items


@pytest.mark.parametrize("path", capture_files("mig_lgi"), ids=lambda p: p.name)
def test_every_lgi_parses(path):
    assert parse_mig_lgi(path.read_text()).items


def test_lgip_esxi_zero_free(read):
    r = parse_mig_lgip(read("mig_lgip/a100-40gb-esxi-vgpu-host-7-profiles-0-free.txt"))
    names = [p.name for p in r.items]
    assert names == ["1g.5gb", "1g.5gb+me", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]
    assert all(p.instances_free == 0 for p in r.items)
    assert [p.instances_total for p in r.items] == [7, 1, 3, 2, 1, 1]
    seven = r.items[-1]
    assert (seven.profile_id, seven.memory_gib, seven.sm, seven.ce, seven.jpeg, seven.ofa) == (
        0,
        39.5,
        98,
        7,
        1,
        1,
    )


def test_lgip_all_free(read):
    r = parse_mig_lgip(read("mig_lgip/a100-sxm4-40gb-all-free.txt"))
    assert len(r.items) == 7
    assert all(p.instances_free == p.instances_total for p in r.items)
    assert r.items[0].name == "1g.5gb" and r.items[0].instances_total == 7


def test_lgi_four_instances(read):
    r = parse_mig_lgi(read("mig_lgi/a100-40gb-4-gpu-instances.txt"))
    got = [
        (i.name, i.profile_id, i.instance_id, i.placement_start, i.placement_size) for i in r.items
    ]
    assert got == [
        ("1g.5gb", 19, 11, 0, 1),
        ("1g.5gb", 19, 12, 1, 1),
        ("2g.10gb", 14, 6, 2, 2),
        ("3g.20gb", 9, 1, 4, 4),
    ]


def test_lgi_narrow_table(read):
    r = parse_mig_lgi(read("mig_lgi/a100-sxm4-40gb-2x-3g.20gb.txt"))
    assert [(i.instance_id, i.placement_start) for i in r.items] == [(1, 4), (2, 0)]


# Layout of `nvidia-smi mig -lci` as shown in NVIDIA's MIG user guide (no real capture in
# the corpus); values are illustrative.
_LCI = """\
+--------------------------------------------------------------------+
| Compute instances:                                                 |
| GPU     GPU       Name             Profile   Instance   Placement  |
|       Instance                       ID        ID       Start:Size |
|         ID                                                         |
|====================================================================|
|   0      1       MIG 3g.20gb          2         0          0:3     |
+--------------------------------------------------------------------+
|   0      2       MIG 1c.3g.20gb       0         1          1:1     |
+--------------------------------------------------------------------+
"""


def test_lci_layout():
    r = parse_mig_lci(_LCI)
    assert [(c.gpu_instance_id, c.name, c.instance_id, c.placement_size) for c in r.items] == [
        (1, "3g.20gb", 0, 3),
        (2, "1c.3g.20gb", 1, 1),
    ]


def test_no_mig_devices_is_a_fact():
    r = parse_mig_lgi("No MIG-enabled devices found.\n")
    assert r.items == () and r.no_mig_devices
    r2 = parse_mig_lci("No compute instances found: Not Found\n")
    assert r2.items == () and not r2.no_mig_devices


@pytest.mark.parametrize("text", ["", "garbage\n", "| GPU instances: |\n+---+\n"])
def test_garbage_raises(text):
    for fn in (parse_mig_lgip, parse_mig_lgi, parse_mig_lci):
        with pytest.raises(ParseError):
            fn(text)
