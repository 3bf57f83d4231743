"""ib_write_bw (perftest): a real TCP rendezvous between two lab nodes on port 18515.

Server mode (no peer argument) listens and waits for one client; the client connects to
the peer. They exchange their NIC state over the socket (plus a real payload, so a broken
lab network fails like a broken fabric), agree on one result table and both print it in
perftest's layout. A NIC that is down (fault nic-down) fails the way perftest does.
"""

from __future__ import annotations

import json
import os
import random
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from . import model, nic, probes, state
from .state import Node

SEP = "-" * 87
PAYLOAD = 1 << 21  # bytes really sent over the lab network per test
HALF_SIZE = 3930.0  # message size at which a 1-QP write reaches ~half its plateau (captures)


@dataclass
class Opts:
    dev: str | None = None
    port: int = 18515
    peer: str | None = None
    gbits: bool = False
    all_sizes: bool = False
    size: int = 65536
    iters: int | None = None
    duration: int | None = None
    qps: int = 1
    use_cuda: int | None = None
    rdma_cm: bool = False
    tos: int | None = None
    extra: dict[str, str] = field(default_factory=dict)


def parse(argv: list[str]) -> Opts:
    o = Opts()
    it = iter(argv)
    for arg in it:
        key, eq, val = arg.partition("=")

        def value(key: str = key, eq: str = eq, val: str = val) -> str:
            return val if eq else next(it, "")

        if key in ("-d", "--ib-dev"):
            o.dev = value()
        elif key in ("-p", "--port"):
            o.port = int(value())
        elif key in ("-s", "--size"):
            o.size = probes.parse_size(value())
        elif key in ("-n", "--iters"):
            o.iters = int(value())
        elif key in ("-D", "--duration"):
            o.duration = int(value())
        elif key in ("-q", "--qp"):
            o.qps = int(value())
        elif key == "--use_cuda":
            o.use_cuda = int(value())
        elif key in ("-T", "--tos"):
            o.tos = int(value())
        elif key in ("-x", "--gid-index", "-m", "--mtu", "-i", "--ib-port", "-t", "--tx-depth"):
            o.extra[key] = value()
        elif key == "--report_gbits":
            o.gbits = True
        elif key in ("-a", "--all"):
            o.all_sizes = True
        elif key in ("-R", "--rdma_cm"):
            o.rdma_cm = True
        elif key.startswith("-"):
            continue  # -F, --use_cuda_dmabuf, ...: accepted, no effect here
        else:
            o.peer = key
    return o


def err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def pick_nic(node: Node, o: Opts) -> dict[str, Any] | None:
    """The HCA like perftest picks it: -d, else the first device. Prints perftest's error."""
    nics = nic.nics_visible(node)
    if not nics:
        err(" Failed to get IB devices list")
        return None
    if o.dev is None:
        return nics[0]
    chosen = next((n for n in nics if n["hca"] == o.dev), None)
    if chosen is None:
        err(f" IB device {o.dev} not found")
        err(" Unable to find the Infiniband/RoCE device")
    return chosen


def port_ok(node: Node, n: dict[str, Any]) -> bool:
    if nic.is_down(node, n):
        err(" Port number 1 state is Down")
        err(" Couldn't set the link layer")
        return False
    return True


def healthy_gbits(node: Node, n: dict[str, Any]) -> float:
    bw = float(node.profile["bandwidth"]["ib_write_bw_gbps"])
    top = max(int(x["rate"]) for x in model.nic_list(node))
    return bw * int(n["rate"]) / top


def locality(node: Node, n: dict[str, Any], gpu_index: int | None) -> float:
    """GPUDirect from a GPU far from the NIC loses bandwidth (captured 67 vs 162 Gb/s)."""
    if gpu_index is None:
        return 1.0
    gpus = probes.usable_gpus(node)
    if gpu_index >= len(gpus):
        return 1.0
    g = gpus[gpu_index]
    if int(n.get("gpu", -1)) == g.slot:
        return 1.0
    owner = model.gpu_by_slot(node, int(n.get("gpu", 0)))
    return 0.85 if owner is not None and owner.numa == g.numa else 0.4


def cuda_preamble(node: Node, o: Opts) -> bool:
    if o.use_cuda is None:
        return True
    out("Perftest doesn't supports CUDA tests with inline messages: inline size set to 0")
    try:
        probes.cuda_init(node)
    except probes.CudaError as exc:
        out("initializing CUDA")
        err(f"cuInit(0) failed: {exc.text}")
        err(" Couldn't init GPU context")
        return False
    gpus = probes.usable_gpus(state.load())
    out("initializing CUDA")
    out("Listing all CUDA devices in system:")
    for i, g in enumerate(gpus):
        out(f"CUDA device {i}: PCIe address is {g.bus_id[9:14]}")
    if o.use_cuda >= len(gpus):
        err(f"No such device: {o.use_cuda}")
        return False
    out("")
    out(f"Picking device No. {o.use_cuda}")
    out(f"[pid = {os.getpid()}, dev = {o.use_cuda}] device name = [{gpus[o.use_cuda].name}]")
    out("creating CUDA Ctx")
    out("making it the current CUDA Ctx")
    out("CUDA device integrated: 0")
    out("cuMemAlloc() of a 16777216 bytes GPU buffer")
    out("allocated GPU buffer address at 00007f763a800000 pointer=0x7f763a800000")
    return True


def header(n: dict[str, Any], o: Opts, server: bool) -> list[str]:
    eth = n["link_layer"] == "Ethernet"
    lines = [
        SEP,
        "                    RDMA_Write BW Test",
        f" Dual-port       : OFF\t\tDevice         : {n['hca']}",
        f" Number of qps   : {o.qps}\t\tTransport type : IB",
        " Connection type : RC\t\tUsing SRQ      : OFF",
        " PCIe relax order: ON",
        " ibv_wr* API     : ON",
    ]
    if not server:
        lines.append(" TX depth        : 128")
    lines += [
        " CQ Moderation   : 1",
        " Mtu             : 4096[B]",
        f" Link type       : {'Ethernet' if eth else 'IB'}",
    ]
    if eth:
        lines.append(" GID index       : 3")
    lines += [
        " Max inline data : 0[B]",
        f" rdma_cm QPs\t : {'ON' if o.rdma_cm else 'OFF'}",
        f" Data ex. method : {'rdma_cm' if o.rdma_cm else 'Ethernet'}",
        SEP,
    ]
    return lines


def gid_of(ip: str) -> str:
    return "00:00:00:00:00:00:00:00:00:00:255:255:" + ":".join(ip.split("."))


def address_lines(local: dict[str, Any], remote: dict[str, Any], eth: bool) -> list[str]:
    lines = []
    for label, side in (("local", local), ("remote", remote)):
        lid = "0000" if eth else f"{side['lid']:#06x}"
        lines.append(
            f" {label} address: LID {lid} QPN {side['qpn']:#06x} PSN {side['psn']:#08x} "
            f"RKey {side['rkey']:#08x} VAddr {side['vaddr']:#016x}"
        )
        if eth:
            lines.append(f" GID: {gid_of(side['ip'])}")
    return [*lines, SEP]


def endpoint(n: dict[str, Any], ip: str) -> dict[str, Any]:
    rnd = random.Random()
    return {
        "ip": ip,
        "qpn": rnd.randint(0x100, 0xFFFF),
        "psn": rnd.randint(0, 0xFFFFFF),
        "rkey": rnd.randint(0x1000, 0x1FFFFF),
        "vaddr": 0x7F0000000000 + rnd.randint(0, 1 << 36),
        "lid": int(n["hca"].split("_")[-1]) + 70,
    }


def results(peak_gbits: float, o: Opts) -> list[dict[str, float]]:
    sizes = [1 << i for i in range(1, 24)] if o.all_sizes else [o.size]
    rows = []
    for size in sizes:
        avg = peak_gbits * size * size / (size * size + HALF_SIZE * HALF_SIZE)
        avg *= random.uniform(0.997, 1.003)
        peak = 0.0 if o.duration else avg * random.uniform(1.0, 1.002)
        bytes_s = avg * 1e9 / 8
        iters = int(bytes_s * o.duration / size) if o.duration else (o.iters or 5000)
        rows.append(
            {"size": size, "iters": iters, "peak": peak, "avg": avg, "mpps": bytes_s / size / 1e6}
        )
    return rows


def table(rows: list[dict[str, float]], gbits: bool) -> list[str]:
    unit = "Gb/sec" if gbits else "MB/sec"
    lines = [f" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]"]
    for r in rows:
        conv = 1.0 if gbits else 1e9 / 8 / 1e6  # MB/sec: 10^6 bytes, as gpuboot reads it
        lines.append(
            f" {int(r['size']):<7d}    {int(r['iters']):<7d}          "
            f"{r['peak'] * conv:<7.2f}            {r['avg'] * conv:<7.2f}\t\t   "
            f"{r['mpps']:<7.6f}"
        )
    return [*lines, SEP]


def abort_status(node: Node) -> int | None:
    """The work completion status a perftest-abort fault makes the run fail with, or None."""
    found = model.faults_of(node, "perftest-abort")
    return int(found[0]["args"][0]) if found else None


def abort(side: str, status: int) -> int:
    """A work completion in error part way through: perftest's lines for it (stderr, as
    NOTIFY_COMP_ERROR_SEND and run_iter_bw's caller print them), exit 1. The sizes done
    before were printed; the rest never run (the capture
    h200-roce-a-sweep-aborted-completion-error-status10.txt)."""
    err(f" Completion with error at {side}")
    err(f" Failed status {status}: wr_id 0 syndrom 0x88")
    err("scnt=128, ccnt=0")
    err(" Failed to complete run_iter_bw function successfully")
    return 1


def send(sock: socket.socket, msg: dict[str, Any]) -> None:
    sock.sendall((json.dumps(msg) + "\n").encode())


def recv(f: Any) -> dict[str, Any]:
    line = f.readline()
    if not line:
        raise ConnectionError("peer closed the connection")
    data: dict[str, Any] = json.loads(line)
    return data


def main(argv: list[str]) -> int:
    o = parse(argv)
    node = state.load()
    if o.duration:
        out(" WARNING: BW peak won't be measured in this run.")
    if not cuda_preamble(node, o):
        return 1
    n = pick_nic(node, o)
    if n is None or not port_ok(node, n):
        return 1
    local_bw = (
        healthy_gbits(node, n)
        * probes.low_bw(node, "ib_write_bw", n["hca"])
        * locality(node, n, o.use_cuda)
    )
    return client(node, n, o, local_bw) if o.peer else server(node, n, o, local_bw)


def server(node: Node, n: dict[str, Any], o: Opts, local_bw: float) -> int:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        srv.bind(("0.0.0.0", o.port))
    except OSError:
        err(f" Couldn't bind to port {o.port}: Address already in use")
        return 1
    srv.listen(1)
    out(
        "\n************************************\n* Waiting for client to connect... *\n"
        "************************************"
    )
    conn, _addr = srv.accept()
    srv.close()
    with conn, conn.makefile("rb") as f:
        try:
            hello = recv(f)
            now = state.load()  # the NIC may have gone down while we waited
            if nic.is_down(now, n):
                send(conn, {"ok": False})
                err(" Port number 1 state is Down")
                err("Failed to exchange data between server and clients")
                return 1
            if not hello.get("ok"):
                err("Failed to exchange data between server and clients")
                return 1
            me = endpoint(n, conn.getsockname()[0])
            # Read the payload through the same buffered reader that read the hello line.
            if len(f.read(int(hello["payload"]))) != int(hello["payload"]):
                raise ConnectionError("short payload")
            opts = Opts(**{**o.__dict__, **hello["opts"], "extra": {}})
            rows = results(min(local_bw, float(hello["bw"])), opts)
            send(conn, {"ok": True, "endpoint": me, "rows": rows})
        except (ConnectionError, ValueError, KeyError):
            err("Failed to exchange data between server and clients")
            return 1
    eth = n["link_layer"] == "Ethernet"
    status = abort_status(node)
    shown = rows if status is None else rows[: len(rows) // 2]
    out(
        "\n".join(
            header(n, opts, True)
            + address_lines(me, hello["endpoint"], eth)
            + table(shown, o.gbits)[: None if status is None else -1]
        )
    )
    return 0 if status is None else abort("server", status)


def client(node: Node, n: dict[str, Any], o: Opts, local_bw: float) -> int:
    sock = None
    deadline = time.monotonic() + 3.0
    while sock is None:
        try:
            sock = socket.create_connection((o.peer, o.port), timeout=10)
        except OSError:
            if time.monotonic() > deadline:
                err(f" Couldn't connect to {o.peer}:{o.port}")
                err(
                    "Unable to open file descriptor for socket connection Unable to init the "
                    "socket connection"
                )
                return 1
            time.sleep(0.2)
    me = endpoint(n, sock.getsockname()[0])
    with sock, sock.makefile("rb") as f:
        try:
            send(
                sock,
                {
                    "ok": True,
                    "bw": local_bw,
                    "endpoint": me,
                    "payload": PAYLOAD,
                    "opts": {
                        "all_sizes": o.all_sizes,
                        "size": o.size,
                        "iters": o.iters,
                        "duration": o.duration,
                        "qps": o.qps,
                    },
                },
            )
            sock.sendall(b"\0" * PAYLOAD)
            reply = recv(f)
        except (ConnectionError, OSError, ValueError):
            reply = {"ok": False}
    if not reply.get("ok"):
        err("Failed to exchange data between server and clients")
        return 1
    eth = n["link_layer"] == "Ethernet"
    status = abort_status(node)
    rows = reply["rows"] if status is None else reply["rows"][: len(reply["rows"]) // 2]
    out(
        "\n".join(
            header(n, o, False)
            + address_lines(me, reply["endpoint"], eth)
            + table(rows, o.gbits)[: None if status is None else -1]
        )
    )
    if status is not None:
        return abort("client", status)
    if o.use_cuda is not None:
        out("deallocating GPU buffer 00007f763a800000")
        out("destroying current CUDA Ctx")
    return 0
