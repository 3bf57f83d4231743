"""lspci -n / -nn / -D / -k listings: real published captures (captures/lspci, sources in
SOURCES-extra.md) and the emulator's own output, read into bus functions."""

from __future__ import annotations

import pytest

from gpuboot.errors import ParseError
from gpuboot.evidence import parser_for
from gpuboot.evidence.lspci import bus_address, ca_type, connectx, gpus, nvswitches, parse_lspci
from tests.unit.gpuboot_lab._emu import make_node

from .conftest import capture_files

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier


@pytest.mark.parametrize("path", capture_files("lspci"), ids=lambda p: p.name)
def test_every_capture_is_read(path):
    funcs = parse_lspci(path.read_text())
    assert funcs and all(f.address.startswith("0000:") for f in funcs)


def test_h100_sxm5_nn_listing(read):
    funcs = parse_lspci(read("lspci/h100-sxm5-4gpu-nn-grep-nvidia.txt"))
    assert [f.address for f in gpus(funcs)] == [
        "0000:06:00.0",
        "0000:0c:00.0",
        "0000:46:00.0",
        "0000:4c:00.0",
    ]
    f = funcs[0]
    assert (f.cls, f.ids, f.rev) == ("0302", "10de:2330", "a1")
    assert f.name == "NVIDIA Corporation GH100 [H100 SXM5 80GB]"  # brackets inside the name


def test_domain_and_unnamed_device(read):
    (f,) = parse_lspci(read("lspci/a100-nn-D-unnamed-device.txt"))
    assert (f.address, f.ids, f.name) == ("0000:d0:00.0", "10de:20b9", "NVIDIA Corporation Device")


def test_k_detail_lines_are_skipped(read):
    (f,) = parse_lspci(read("lspci/h100-pcie-nnk-vfio.txt"))
    assert (f.address, f.ids) == ("0000:41:00.0", "10de:2331")


def test_connectx_functions_and_their_ibstat_ca_type(read):
    funcs = connectx(parse_lspci(read("lspci/connectx5-2port-nn-grep-mellanox.txt")))
    assert [f.address for f in funcs] == ["0000:86:00.0", "0000:86:00.1"]
    assert {ca_type(f) for f in funcs} == {"MT4119"}  # ibstat's CA type of a ConnectX-5


def test_plain_n_form_layout_example():
    # layout example of `lspci -n` (pciutils' show_terse with -n), not a capture
    text = (
        "19:00.0 0302: 10de:2330 (rev a1)\n05:00.0 0680: 10de:22a3 (rev a1)\n"
        "1a:00.0 0200: 15b3:1021\n"
    )
    funcs = parse_lspci(text)
    assert [f.address for f in gpus(funcs)] == ["0000:19:00.0"]
    assert [f.ids for f in nvswitches(funcs)] == ["10de:22a3"]  # a bridge, not a GPU
    assert ca_type(connectx(funcs)[0]) == "MT4129" and connectx(funcs)[0].rev is None


def test_names_only_listing_is_unreadable():
    with pytest.raises(ParseError):
        parse_lspci("19:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)\n")


def test_empty_listing_is_no_device():
    assert parse_lspci("") == ()


def test_addresses_normalise():
    assert bus_address("00000000:9B:00.0") == "0000:9b:00.0"  # nvidia-smi's form
    assert bus_address("9b:00.0") == "0000:9b:00.0"


def test_registered_for_bundle_files():
    assert parser_for("lspci_-n_-d_10de:.txt") is parse_lspci
    assert parser_for("lspci_-nn.txt") is parse_lspci


@pytest.mark.parametrize("flags", [("-n",), ("-nn",), ("-D", "-n"), ("-nnk",)])
def test_emulator_prints_what_the_parser_reads(tmp_path, flags):
    node = make_node(tmp_path, "hgx-h100-sxm-8gpu")
    funcs = parse_lspci(node.run("lspci", *flags, check=True).out)
    assert len(gpus(funcs)) == 8 and len(nvswitches(funcs)) == 4
    assert {ca_type(f) for f in connectx(funcs)} == {"MT4129"} and len(connectx(funcs)) == 8
    only = parse_lspci(node.run("lspci", *flags, "-d", "10de:", check=True).out)
    assert {f.vendor for f in only} == {"10de"}
