"""Reads the controller makes of what it does not control, each within a cap: a node's answer
(read chunk by chunk, cut off at the cap), and the files an operator points gpuboot at."""

import json
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from gpuboot import remote


# ---------------------------------------------------------------- a node's answer
def _child(code: str) -> dict:
    """Run ``code`` in a fresh interpreter (its own peak RSS) and return the JSON it prints."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.subprocess
def test_a_300_mb_node_answer_is_cut_off_at_the_cap_while_read_not_buffered_whole():
    got = _child(
        """
        import json, resource, testinfra
        from gpuboot import remote
        remote.MAX_ANSWER_BYTES = 8 * 1024 * 1024
        host = testinfra.get_host("local://")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            remote.run_with_deadline(host, "head -c 300000000 /dev/zero", 120, "collection")
            error = None
        except remote.AnswerTooLarge as exc:
            error = exc.message
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({"error": error, "grew_kb": after - before}))
        """
    )
    assert got["error"] and "cap of 8388608 bytes" in got["error"], got
    assert got["grew_kb"] < 64 * 1024, got  # the cap and a chunk, not the 300 MB answer


@pytest.mark.subprocess
def test_an_answer_within_the_cap_is_returned_whole_with_its_exit_code_and_stderr():
    import testinfra

    host = testinfra.get_host("local://")
    out = remote.run_with_deadline(
        host, "head -c 100000 /dev/zero | tr '\\0' a; echo oops >&2; exit 3", 60, "x"
    )
    assert out.stdout == "a" * 100000
    assert out.stderr == "oops\n"
    assert out.rc == 3


@pytest.mark.subprocess
def test_stderr_past_what_is_kept_is_read_and_dropped_not_an_error():
    import testinfra

    host = testinfra.get_host("local://")
    out = remote.run_with_deadline(
        host, "head -c 3000000 /dev/zero >&2; echo done", 60, "x", max_bytes=1024
    )
    assert out.stdout == "done\n"
    assert len(out.stderr_bytes) == remote.STDERR_KEPT


def test_an_answer_over_the_cap_is_that_nodes_error_naming_the_cap(monkeypatch):
    from gpuboot import node_collect

    def too_large(*_a, **_k):
        raise remote.AnswerTooLarge("evidence collection: the node's answer passed the cap")

    monkeypatch.setattr(node_collect, "run_with_deadline", too_large)
    with pytest.raises(remote.AnswerTooLarge) as caught:
        node_collect.collect_node("n1", object(), {})
    assert caught.value.where == "n1"


# ---------------------------------------------------------------- files gpuboot is pointed at
def _special_files(tmp_path, valid: str):
    """name -> a path gpuboot must refuse to read as an operator's file; the link leads to
    ``valid`` content, which read as a file would load."""
    import os

    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    link = tmp_path / "link.yaml"
    link.symlink_to(tmp_path / "elsewhere.yaml")
    (tmp_path / "elsewhere.yaml").write_text(valid)
    return {"FIFO": fifo, "device": "/dev/zero", "symbolic link": link, "directory": tmp_path}


def _shipped(loader: str) -> str:
    from gpuboot.profiles import PROFILE_DIR
    from gpuboot.stacks import STACK_DIR

    if loader == "stack":  # its name is the link's, as a stack file's must be
        text = (STACK_DIR / "lts-550-cuda12.4.yaml").read_text()
        return text.replace("name: lts-550-cuda12.4", "name: link")
    return (PROFILE_DIR / "hgx-h100-sxm-8gpu.yaml").read_text()


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


BINARY = b"schema: 1\nname: \x00\x01\x02" + bytes(range(256)) * 64
LATIN1 = "schema: 1\nname: café\n".encode("latin-1")


def _load_stack(path):
    from gpuboot.stacks import load_stack

    return load_stack(str(path))


def _load_profile(path):
    from gpuboot.profiles import load_profile

    return load_profile(str(path))


LOADERS = {"stack": _load_stack, "profile": _load_profile}


@pytest.mark.parametrize("loader", sorted(LOADERS))
@pytest.mark.parametrize(
    "content, offset_text",
    [(BINARY, "NUL byte at offset 16"), (LATIN1, "byte 0xe9 at offset 19")],
    ids=["binary", "latin-1"],
)
def test_a_binary_or_non_utf8_file_is_bad_input_naming_the_file_and_offset(
    tmp_path, loader, content, offset_text
):
    from gpuboot.errors import BadInput

    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    with pytest.raises(BadInput) as caught:
        LOADERS[loader](path)
    err = caught.value
    assert err.exit_code == 2
    assert str(path) in (err.where or "")
    assert offset_text in err.message
    assert len(str(err)) < 600  # the file is named, never dumped


@pytest.mark.parametrize("loader", sorted(LOADERS))
@pytest.mark.parametrize("kind", ["FIFO", "device", "symbolic link", "directory"])
def test_a_fifo_device_link_or_directory_is_refused_not_read(tmp_path, loader, kind):
    from gpuboot.errors import BadInput

    path = _special_files(tmp_path, _shipped(loader))[kind]
    with pytest.raises(BadInput) as caught:
        LOADERS[loader](path)
    assert caught.value.exit_code == 2
    assert kind in caught.value.message  # named for what it is, not "does not exist"


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_an_oversized_or_deeply_nested_file_is_refused_within_its_bounds(tmp_path, loader):
    from gpuboot.errors import BadInput

    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 200 + "]" * 200 + "\n")
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * 200_000)
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(
            f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n"
            for p, c in zip("abcdefg", "bcdefgh", strict=True)
        )
    )
    for path, why in ((deep, "nests deeper"), (big, "larger than"), (bomb, "aliases")):
        with pytest.raises(BadInput) as caught:
            LOADERS[loader](path)
        assert why in caught.value.message, (path.name, caught.value)


# ---------------------------------------------------------------- a bundle's meta.json
@pytest.mark.parametrize("depth", [500, 100_000])
def test_a_deeply_nested_meta_json_is_a_bundle_error_not_a_deep_document(depth):
    from gpuboot.bundle.store import BundleError, parse_meta

    data = b'{"pins": {}, "x": ' + b"[" * depth + b"]" * depth + b"}"
    with pytest.raises(BundleError) as caught:
        parse_meta(data, "bundle/n1")
    assert "nests deeper than" in caught.value.message


# ---------------------------------------------------------------- status's kept runs
def test_status_passes_over_a_deeply_nested_report_and_a_fifo_certificate(tmp_path, monkeypatch):
    import os
    from datetime import UTC, datetime

    from gpuboot import status

    runs = tmp_path / "runs"
    monkeypatch.setenv("GPUBOOT_RUNS", str(runs))
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    good, deep = runs / "20261120T080000-certify-aaaaaa", runs / "20261121T080000-certify-bbbbbb"
    (good / "reports" / "certificates").mkdir(parents=True)
    nodes = [{"host": "n1", "verdict": "PASS", "findings": []}]
    (good / "report.json").write_text(json.dumps({"run_id": good.name, "nodes": nodes}))
    os.mkfifo(good / "reports" / "certificates" / "n1.json")  # read, it would hang status
    deep.mkdir()
    (deep / "report.json").write_text('{"nodes": ' + "[" * 100_000 + "]" * 100_000 + "}")
    doc = status.fleet_status(["n1"], now=datetime(2026, 11, 24, tzinfo=UTC))
    (node,) = doc["nodes"]
    assert node["certify"]["run_id"] == good.name and node["certify"]["certificate"] is None


# ---------------------------------------------------------------- the kubeconfig
@pytest.mark.parametrize("kind", ["FIFO", "device", "symbolic link", "binary", "deep"])
def test_a_kubeconfig_that_is_special_binary_or_deep_is_refused_before_the_client_reads_it(
    tmp_path, kind
):
    from types import SimpleNamespace

    from gpuboot.cli import preflight
    from gpuboot.errors import BadInput

    paths = _special_files(tmp_path, KUBECONFIG)
    paths["binary"] = tmp_path / "binary"
    paths["binary"].write_bytes(BINARY)
    paths["deep"] = tmp_path / "deep"
    paths["deep"].write_text("clusters: " + "[" * 500 + "]" * 500 + "\n")
    args = SimpleNamespace(kubeconfig=str(paths[kind]), k8s_context=None)
    with pytest.raises(BadInput) as caught:
        preflight.check_kubeconfig(args)
    assert caught.value.exit_code == 2 and str(paths[kind]) in (caught.value.where or "")


# ---------------------------------------------------------------- certify's engine
@pytest.mark.subprocess
def test_a_node_flooding_its_answer_is_error_naming_the_cap_and_the_others_are_judged(
    tmp_path, monkeypatch
):
    import testinfra

    from gpuboot import engine

    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / "runs"))
    monkeypatch.setattr(remote, "MAX_ANSWER_BYTES", 8 * 1024 * 1024, raising=False)
    (tmp_path / "proc").mkdir()
    inv = tmp_path / "inv.yml"
    inv.write_text(
        "all:\n  vars: {gpuboot_profile: hgx-h100-sxm-8gpu, gpuboot_probes: none, "
        "nvidia_driver_branch: '550', nvidia_driver_version: 550.54.15-1, "
        f"gpuboot_procfs: {tmp_path / 'proc'}}}\n"
        "  hosts:\n    n1: {ansible_host: 192.0.2.1}\n    n2: {ansible_host: 192.0.2.2}\n"
    )

    class Flooding:
        """A node whose shell answers 300 MB, through a testinfra backend as ssh would."""

        backend = testinfra.get_host("local://").backend

        def run(self, _command):
            return self.backend.run("head -c 300000000 /dev/zero")

    class Local:
        def run(self, command):
            out = subprocess.run(["sh", "-c", command], capture_output=True, text=True)
            return SimpleNamespace(rc=out.returncode, stdout=out.stdout, stderr=out.stderr)

    hosts = {"n1": Local(), "n2": Flooding()}
    report = engine.run(str(inv), transport=lambda name, _vars: hosts[name]).to_dict()
    nodes = {n["host"]: n for n in report["nodes"]}
    assert nodes["n2"]["verdict"] == "ERROR"
    (reason,) = {f["reason"] for f in nodes["n2"]["findings"]}
    assert "n2" in reason and "cap of 8388608 bytes" in reason, reason
    assert len({f["reason"] for f in nodes["n1"]["findings"]}) > 1  # n1 judged on its own
