"""A node is less trusted than the controller: its collection answer (a base64 gzipped tar) is
data within limits, never a path to write. Only the probe files the script asked for, as
regular files within the size caps, reach the evidence; anything else is refused whole."""

from __future__ import annotations

import base64
import gzip
import io
import os
import stat
import subprocess
import tarfile
import time
import tracemalloc

import pytest

from gpuboot import collect
from gpuboot.bundle.model import BundleError, ProbeOutput
from gpuboot.bundle.store import bundle_host_dir, read_host_bundle, write_host_bundle
from gpuboot.collect import PROBES, script, unpack
from gpuboot.errors import GpubootError

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

DMESG = "dmesg.txt"


def _payload(*members: tuple[str, bytes | str], kind: bytes = tarfile.REGTYPE) -> str:
    """A tar like the node's `tar -cf - .`, with members as given (name, content or target)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        root = tarfile.TarInfo(".")
        root.type = tarfile.DIRTYPE
        tar.addfile(root)
        for name, data in members:
            info = tarfile.TarInfo(name)
            if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                info.type, info.linkname = kind, str(data)
                tar.addfile(info)
            elif kind != tarfile.REGTYPE:
                info.type = kind
                tar.addfile(info)
            else:
                raw = data.encode() if isinstance(data, str) else data
                info.size = len(raw)
                tar.addfile(info, io.BytesIO(raw))
    return base64.b64encode(gzip.compress(buf.getvalue())).decode()


def _good(*extra: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    return (
        ("./" + DMESG, "ok\n"),
        ("./" + DMESG + ".stderr", ""),
        ("./dmesg.txt.rc", "0\n"),
        *extra,
    )


def _keep(tmp_path, payload: str):
    """What certify does with an answer: unpack it, then write the host's bundle."""
    evidence = unpack(payload)
    write_host_bundle(tmp_path / "bundle" / "node1", evidence, {"host": "node1"})
    return evidence


@pytest.mark.parametrize("name", ["../../escaped.txt", "./../escaped.txt", "sub/../../escaped.txt"])
def test_traversing_member_names_are_refused_and_nothing_written(tmp_path, name):
    with pytest.raises(collect.NodeAnswerRejected, match="not a probe file"):
        _keep(tmp_path, _payload(*_good((name, "pwned\n"))))
    assert not list(tmp_path.rglob("escaped.txt"))
    assert not (tmp_path / "bundle").exists()


def test_absolute_member_name_is_refused(tmp_path):
    target = tmp_path / "outside" / "planted.txt"
    target.parent.mkdir()
    with pytest.raises(collect.NodeAnswerRejected):
        _keep(tmp_path, _payload(*_good((str(target), "pwned\n"))))
    assert not target.exists()


def test_a_name_the_script_did_not_ask_for_is_refused(tmp_path):
    with pytest.raises(collect.NodeAnswerRejected, match="authorized_keys"):
        _keep(tmp_path, _payload(*_good(("./authorized_keys", "ssh-ed25519 AAAA evil\n"))))


@pytest.mark.parametrize(
    ("kind", "data"),
    [
        (tarfile.SYMTYPE, "/etc/shadow"),
        (tarfile.LNKTYPE, "/etc/shadow"),
        (tarfile.FIFOTYPE, ""),
        (tarfile.CHRTYPE, ""),
        (tarfile.DIRTYPE, ""),
    ],
    ids=["symlink", "hardlink", "fifo", "chardev", "dir"],
)
def test_only_regular_files_are_accepted(kind, data):
    with pytest.raises(collect.NodeAnswerRejected, match="regular file"):
        unpack(_payload(("./nvidia-smi_-q.txt", data), kind=kind))


def test_a_duplicated_member_is_refused():
    with pytest.raises(collect.NodeAnswerRejected, match="twice"):
        unpack(_payload(*_good(("./" + DMESG, "second copy\n"))))


def test_size_caps_per_file_per_node_and_payload(monkeypatch):
    monkeypatch.setattr(collect, "MAX_FILE_BYTES", 1000)
    with pytest.raises(collect.NodeAnswerRejected, match="size cap"):
        unpack(_payload(("./" + DMESG, "x" * 1001)))
    assert unpack(_payload(("./" + DMESG, "x" * 1000)))[DMESG].stdout == "x" * 1000
    monkeypatch.setattr(collect, "MAX_NODE_BYTES", 1500)
    with pytest.raises(collect.NodeAnswerRejected, match="size cap"):
        unpack(_payload(("./" + DMESG, "x" * 800), ("./lsmod.txt", "y" * 800)))
    with pytest.raises(collect.NodeAnswerRejected, match="payload"):
        unpack("A" * 200_000)  # checked before any decoding


def test_not_base64_or_not_a_plain_tar_is_refused():
    with pytest.raises(collect.NodeAnswerRejected, match="base64"):
        unpack("this is not base64!")
    gz = io.BytesIO()
    with tarfile.open(fileobj=gz, mode="w:gz") as tar:
        info = tarfile.TarInfo(DMESG)
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(collect.NodeAnswerRejected, match="tar"):  # one gzip only, no nesting
        unpack(base64.b64encode(gzip.compress(gz.getvalue())).decode())


def _bomb() -> bytes:
    """1 GiB of zeros in 1 MB: gzip members one after another inflate as one stream."""
    return gzip.compress(bytes(8 << 20), 9) * 128


@pytest.mark.parametrize("before", [b"", b"tar"], ids=["alone", "after-a-tar"])
def test_a_gzip_bomb_is_refused_fast_in_bounded_memory(before):
    tar = base64.b64decode(_payload(*_good())) if before else b""
    payload = base64.b64encode(tar + _bomb()).decode()
    tracemalloc.start()
    started = time.process_time()
    with pytest.raises(collect.NodeAnswerRejected, match="past the tar's end"):
        unpack(payload)
    spent, peak = time.process_time() - started, tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert spent < 0.5, spent  # a few records inflated, not the 1 GiB
    assert peak < 4 << 20, peak  # the 1.4 MB payload and its decoding, nothing of the GiB


def test_a_header_that_reads_past_the_cap_is_refused_there(monkeypatch):
    # a GNU long-name header whose name "is" 1 GiB: tarfile reads what it declares
    monkeypatch.setattr(collect, "MAX_NODE_BYTES", 4096)
    info = tarfile.TarInfo("././@LongLink")
    info.type, info.size = tarfile.GNUTYPE_LONGNAME, 1 << 30
    header = info.tobuf(format=tarfile.GNU_FORMAT)
    assert collect.inflate_cap(frozenset(str(i) for i in range(100))) < 1 << 20
    payload = base64.b64encode(gzip.compress(header + bytes(1 << 20))).decode()
    with pytest.raises(collect.NodeAnswerRejected, match="inflates past the per-node cap"):
        unpack(payload)


@pytest.mark.parametrize("cut", [1, 8, 40], ids=["in-trailer", "trailer-gone", "in-data"])
def test_a_cut_gzip_is_refused_and_nothing_written(tmp_path, cut):
    whole = base64.b64decode(_payload(*_good()))
    assert unpack(base64.b64encode(whole).decode())[DMESG].stdout == "ok\n"
    with pytest.raises(collect.NodeAnswerRejected, match="not a readable gzip"):
        _keep(tmp_path, base64.b64encode(whole[:-cut]).decode())
    assert not (tmp_path / "bundle").exists()


def test_a_corrupt_or_missing_gzip_is_refused():
    whole = bytearray(base64.b64decode(_payload(*_good())))
    whole[-6] ^= 0xFF  # its CRC no longer matches what it inflates to
    with pytest.raises(collect.NodeAnswerRejected, match="not a readable gzip"):
        unpack(base64.b64encode(bytes(whole)).decode())
    plain = gzip.decompress(base64.b64decode(_payload(*_good())))  # an older node's plain tar
    with pytest.raises(collect.NodeAnswerRejected, match="not a readable gzip"):
        unpack(base64.b64encode(plain).decode())


def test_the_refusal_is_an_error_naming_the_problem():
    with pytest.raises(GpubootError) as info:
        unpack(_payload(*_good(("../../etc/cron.d/x", "* * * * * root sh\n"))))
    assert "../../etc/cron.d/x" in str(info.value) and "nothing of it was written" in str(
        info.value
    )


@pytest.mark.parametrize(
    ("rc_text", "rc"),
    [("0\n", 0), (" 124 \n", 124), ("garbage", 255), ("", 255), ("-1", 255), ("99999", 255)],
)
def test_rc_companion_is_parsed_defensively(rc_text, rc):
    ev = unpack(_payload(("./" + DMESG, "x\n"), ("./dmesg.txt.rc", rc_text)))
    assert ev[DMESG].rc == rc


def test_a_missing_rc_companion_means_the_probe_failed():
    assert unpack(_payload(("./" + DMESG, "x\n")))[DMESG].rc == 255


def test_real_script_answer_is_accepted_with_its_expected_set(tmp_path):
    out = subprocess.run(
        ["sh", "-c", script(procfs=str(tmp_path))], capture_output=True, text=True, check=True
    )
    evidence = unpack(out.stdout.strip(), PROBES)
    assert set(evidence) == {p.file for p in PROBES}
    # the same answer is refused when the caller expected a smaller set
    with pytest.raises(collect.NodeAnswerRejected):
        unpack(out.stdout.strip(), PROBES[:2])


@pytest.mark.parametrize("host", ["..", ".", "", "a/b", "/etc", "x\0y"])
def test_host_dir_must_be_one_safe_component(tmp_path, host):
    with pytest.raises(BundleError):
        bundle_host_dir(tmp_path, host)


def test_write_host_bundle_refuses_unsafe_names(tmp_path):
    with pytest.raises(BundleError):
        write_host_bundle(tmp_path / "b" / "n1", {"../x.txt": ProbeOutput("x", "", 0)}, {})
    with pytest.raises(BundleError):
        write_host_bundle(tmp_path / "b" / "..", {DMESG: ProbeOutput("x", "", 0)}, {})
    with pytest.raises(BundleError):
        write_host_bundle(tmp_path / "b" / "n1", {"meta.json": ProbeOutput("{}", "", 0)}, {})
    assert not (tmp_path / "x.txt").exists()


def test_bundle_tree_is_private_and_never_written_through_a_link(tmp_path):
    host_dir = tmp_path / "bundle" / "n1"
    host_dir.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    os.symlink(victim, host_dir / DMESG)  # planted before the run
    write_host_bundle(host_dir, {DMESG: ProbeOutput("kernel log\n", "", 0)}, {"probes": "none"})
    assert victim.read_text() == "keep me\n"  # the link was replaced, not written through
    assert stat.S_IMODE(host_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(host_dir.parent.stat().st_mode) == 0o700
    for f in host_dir.iterdir():
        assert stat.S_ISREG(f.lstat().st_mode) and stat.S_IMODE(f.stat().st_mode) == 0o600, f
    evidence, meta = read_host_bundle(host_dir)
    assert evidence[DMESG].stdout == "kernel log\n" and meta["probes"] == "none"


def test_certify_collection_refuses_a_hostile_answer_for_that_host(tmp_path):
    """node_collect.collect_node passes the script's own expected set: a node answering with a
    climbing name is that host's ERROR, named, and nothing lands on the controller."""
    from types import SimpleNamespace

    from gpuboot.node_collect import collect_node

    hostile = _payload(*_good(("../../escaped.txt", "pwned\n")))
    host = SimpleNamespace(
        backend=SimpleNamespace(NAME="ansible", get_hostname=lambda: "node7"),
        ansible=SimpleNamespace(get_variables=lambda: {"gpuboot_probes": "none"}),
        run=lambda _cmd: SimpleNamespace(rc=0, stdout=hostile, stderr=""),
    )
    with pytest.raises(collect.NodeAnswerRejected) as info:
        collect_node("node7", host, {"gpuboot_probes": "none"})
    assert info.value.where == "node7" and "../../escaped.txt" in info.value.message
