"""NICs: ibstat / ibv_devinfo / mlnx_qos formats and state, ib_write_bw over real TCP."""

from __future__ import annotations

import time

import pytest

from gpuboot.evidence import parse_ib_write_bw, parse_ibstat, parse_ibv_devinfo, parse_mlnx_qos
from tests.paths import REPO
from tests.unit.gpuboot_lab._emu import EmuNode, free_port, make_node

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier


@pytest.fixture
def node(tmp_path) -> EmuNode:
    return make_node(tmp_path)


def test_ibstat_lists_cas_like_the_real_tool(node):
    out = node.run("ibstat", check=True).out
    assert out.startswith(
        "CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tFirmware version: 28.39.1002\n"
    )
    parsed = parse_ibstat(out)
    assert len(parsed.cas) == 8
    assert all(p.state == "Active" and p.rate_gbits_s == 400 for ca in parsed.cas for p in ca.ports)


def test_ibstat_unknown_device_panics(node):
    res = node.run("ibstat", "mlx5_9")
    assert res.rc == 255
    assert "main: stat of IB device 'mlx5_9' failed: No such file or directory" in res.err


def test_nic_down_fault(node):
    node.run("ctl", "fault", "add", "nic-down", "mlx5_3", check=True)
    ca = next(c for c in parse_ibstat(node.run("ibstat").out).cas if c.name == "mlx5_3")
    port = ca.ports[0]
    assert (port.state, port.physical_state, port.rate_gbits_s) == ("Down", "Disabled", 40)
    dev = parse_ibv_devinfo(node.run("ibv_devinfo", "-d", "mlx5_3", check=True).out)
    assert dev[0].ports[0].state == "PORT_DOWN"
    assert "enp94s0np0: Link down" in node.run("dmesg").out


def test_nics_vanish_without_the_mlx5_driver(node):
    node.run("modprobe", "-r", "mlx5_ib", check=True)
    assert node.run("ibstat").rc == 255
    assert node.run("ibv_devinfo").out == "No IB devices found\n"


def test_ibv_devinfo_layout(node):
    out = node.run("ibv_devinfo", "-d", "mlx5_0", check=True).out
    assert out.startswith("hca_id:\tmlx5_0\n\ttransport:\t\t\tInfiniBand (0)\n")
    assert "\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n" in out
    assert "\tvendor_part_id:\t\t\t4129\n" in out


def test_mlnx_qos_defaults_set_and_reboot(node):
    qos = parse_mlnx_qos(node.run("mlnx_qos", "-i", "enp26s0np0", check=True).out)
    assert qos.trust_state == "pcp" and not any(qos.pfc_enabled.values())
    out = node.run(
        "mlnx_qos", "-i", "enp26s0np0", "--trust", "dscp", "--pfc", "0,0,0,1,0,0,0,0", check=True
    ).out
    assert "        enabled     0   0   0   1   0   0   0   0   \n" in out
    qos = parse_mlnx_qos(node.run("mlnx_qos", "-i", "enp26s0np0", check=True).out)
    assert qos.trust_state == "dscp" and [p for p, on in qos.pfc_enabled.items() if on] == [3]
    node.run("ctl", "boot", "--force", check=True)  # QoS is not persistent
    assert parse_mlnx_qos(node.run("mlnx_qos", "-i", "enp26s0np0").out).trust_state == "pcp"


def test_mlnx_qos_matches_captured_layout(node):
    node.run("mlnx_qos", "-i", "enp26s0np0", "--trust=dscp", "--pfc=0,0,0,1,0,0,0,0", check=True)
    ours = node.run("mlnx_qos", "-i", "enp26s0np0", check=True).out

    real = (
        REPO / "tests" / "fixtures/captures/mlnx_qos/"
        "connectx-eth4-trust-dscp-pfc-prio3-os-controlled.txt"
    ).read_text()
    assert ours.rstrip("\n") == real.rstrip("\n")


def test_mlnx_qos_bad_interface_and_value(node):
    res = node.run("mlnx_qos", "-i", "eth9")
    assert res.rc == 1 and "eth9" in res.err
    res = node.run("mlnx_qos", "-i", "enp26s0np0", "--pfc", "1,0")
    assert res.rc == 1 and "8 comma-separated values" in res.err


def test_qos_drift_and_clear_restores(node):
    node.run(
        "mlnx_qos", "-i", "enp26s0np0", "--trust", "dscp", "--pfc", "0,0,0,1,0,0,0,0", check=True
    )
    node.run("ctl", "fault", "add", "qos-drift", "mlx5_0", check=True)
    assert parse_mlnx_qos(node.run("mlnx_qos", "-i", "enp26s0np0").out).trust_state == "pcp"
    node.run("ctl", "fault", "clear", "qos-drift", check=True)
    assert parse_mlnx_qos(node.run("mlnx_qos", "-i", "enp26s0np0").out).trust_state == "dscp"


def _pair(tmp_path):
    a = make_node(tmp_path / "a")
    b = make_node(tmp_path / "b")
    return a, b


def _wait_listening(server) -> None:
    """Read the server's banner: it is listening once it printed it (a probe connection
    would be taken for the client)."""
    for line in server.stdout:
        if "Waiting for client to connect" in line:
            return


def test_ib_write_bw_between_two_nodes(tmp_path):
    a, b = _pair(tmp_path)
    port = free_port()
    server = a.popen("ib_write_bw", "-d", "mlx5_0", "--report_gbits", "-p", str(port))
    time.sleep(0.3)
    res = b.run("ib_write_bw", "-d", "mlx5_0", "--report_gbits", "-p", str(port), "127.0.0.1")
    s_out, _ = server.communicate(timeout=20)
    assert res.rc == 0 and server.returncode == 0
    assert "* Waiting for client to connect... *" in s_out
    client = parse_ib_write_bw(res.out)
    srv = parse_ib_write_bw(s_out)
    assert client.runs[0].rows[-1].bw_average_gbits_s == pytest.approx(392, rel=0.02)
    assert srv.runs[0].rows[-1].bw_average_gbits_s == client.runs[0].rows[-1].bw_average_gbits_s
    assert " GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:0:0:1" in res.out


def test_ib_write_bw_sweep_and_low_bandwidth(tmp_path):
    a, b = _pair(tmp_path)
    b.run("ctl", "fault", "add", "low-bandwidth", "ib_write_bw", "0.5", check=True)
    port = free_port()
    server = a.popen("ib_write_bw", "-a", "--report_gbits", "-p", str(port))
    time.sleep(0.3)
    res = b.run("ib_write_bw", "-a", "--report_gbits", "-p", str(port), "127.0.0.1")
    server.communicate(timeout=20)
    rows = parse_ib_write_bw(res.out).runs[0].rows
    assert [r.size_bytes for r in rows][:2] == [2, 4] and rows[-1].size_bytes == 8388608
    assert rows[-1].bw_average_gbits_s == pytest.approx(196, rel=0.02)
    assert rows[0].bw_average_gbits_s < 1


def _bw(a, b, hca):
    port = free_port()
    server = a.popen("ib_write_bw", "-d", hca, "--report_gbits", "-p", str(port))
    time.sleep(0.3)
    res = b.run("ib_write_bw", "-d", hca, "--report_gbits", "-p", str(port), "127.0.0.1")
    server.communicate(timeout=20)
    return parse_ib_write_bw(res.out).runs[0].rows[-1].bw_average_gbits_s


def test_low_bandwidth_on_one_rail_slows_that_rail_only(tmp_path):
    a, b = _pair(tmp_path)
    b.run("ctl", "fault", "add", "low-bandwidth", "ib_write_bw", "0.5", "enp60s0np0", check=True)
    assert _bw(a, b, "mlx5_1") == pytest.approx(196, rel=0.02)  # netdev of mlx5_1
    assert _bw(a, b, "mlx5_2") == pytest.approx(392, rel=0.02)


def test_ib_write_bw_no_server(node):
    res = node.run("ib_write_bw", "-p", str(free_port()), "127.0.0.1")
    assert res.rc == 1
    assert "Couldn't connect to 127.0.0.1:" in res.err


def test_ib_write_bw_nic_down_on_client_and_server(tmp_path):
    a, b = _pair(tmp_path)
    b.run("ctl", "fault", "add", "nic-down", "mlx5_0", check=True)
    res = b.run("ib_write_bw", "-d", "mlx5_0", "127.0.0.1")
    assert res.rc == 1 and "Port number 1 state is Down" in res.err
    a.run("ctl", "fault", "add", "nic-down", "mlx5_0", check=True)
    res = a.run("ib_write_bw", "-d", "mlx5_0")  # server refuses before listening
    assert res.rc == 1 and "Port number 1 state is Down" in res.err


def test_ib_write_bw_server_nic_fails_while_waiting(tmp_path):
    a, b = _pair(tmp_path)
    port = free_port()
    server = a.popen("ib_write_bw", "-d", "mlx5_1", "-p", str(port))
    _wait_listening(server)
    a.run("ctl", "fault", "add", "nic-down", "mlx5_1", check=True)
    res = b.run("ib_write_bw", "-d", "mlx5_1", "-p", str(port), "127.0.0.1")
    server.communicate(timeout=20)
    assert res.rc == 1 and server.returncode == 1
    assert "Failed to exchange data between server and clients" in res.err


def test_ecn_switches_are_sysfs_files_the_driver_owns(node):
    enable = node.root / "run/gpuemu/sys/class/net/enp26s0np0/ecn/roce_np/enable"
    assert sorted(p.name for p in enable.iterdir()) == [str(p) for p in range(8)]
    assert (enable / "3").read_text() == "0\n"  # modelled default: off until configured
    (enable / "3").write_text("1\n")  # what `echo 1 > .../enable/3` does on a real node
    node.run("mlnx_qos", "-i", "enp26s0np0", "--trust", "dscp", check=True)  # a state change
    assert (enable / "3").read_text() == "1\n"  # sync keeps what was written
    node.run("modprobe", "-r", "mlx5_ib", check=True)
    assert not enable.exists()  # no driver, no attributes
    node.run("modprobe", "mlx5_ib", check=True)
    assert (enable / "3").read_text() == "0\n"  # reloaded: the driver's default again
    (enable / "3").write_text("1\n")
    node.run("ctl", "boot", "--force", check=True)
    assert (enable / "3").read_text() == "0\n"  # and after a reboot


def test_ecn_only_on_ethernet_ports(node):
    net = node.root / "run/gpuemu/sys/class/net"
    ethernet = {
        n["netdev"] for n in node.profile["hardware"]["nics"] if n["link_layer"] == "Ethernet"
    }
    assert {p.name for p in net.iterdir()} == ethernet
