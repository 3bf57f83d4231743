"""A bundle is judged only on what it holds, only while its manifest vouches for it, and
never records a secret.

- evaluate reads regular files inside each host directory within caps: a link (to
  /proc/self/environ), a FIFO, an oversized file, a linked host directory, a malformed
  meta.json or a profile outside the bundle makes that host ERROR, never the run;
- MANIFEST.json is verified: a changed, missing or added file, a deleted host or no
  manifest at all makes the host ERROR ("evidence changed since the run") unless
  --ignore-manifest; a meta.json "rules" subset never gives PASS;
- meta.json keeps an allow-list of the host's variables: no credential, token or password.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from gpuboot.bundle import store
from gpuboot.bundle.manifest import write_manifest
from gpuboot.bundle.meta import BUNDLE_VARS
from gpuboot.bundle.model import ProbeOutput
from gpuboot.bundle.store import read_host_bundle, write_host_bundle
from gpuboot.certify import evaluate_bundle
from gpuboot.checks import rules
from gpuboot.node_collect import collect_node
from gpuboot.profiles import PROFILE_DIR
from tests.paths import REPO
from tests.unit.checks._emunode import STACK_VARS, Daemon, dpkg_line, full_node
from tests.unit.checks._emunode import collect as emu_collect

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

GPUBOOT = Path(sys.executable).parent / "gpuboot"
PROFILE = "hgx-h100-sxm-8gpu"
FM = "systemctl_is-active_nvidia-fabricmanager.txt"
# a real Xid line (A100, Xid 63 row remapping), from tests/fixtures/captures
XID_CAPTURE = REPO / "tests/fixtures/captures/xid_dmesg/a100-xid63-row-remapper-single-line.txt"


# ---------------------------------------------------------------- bundles
def _small_bundle(root: Path, hosts=("n1", "n2")) -> Path:
    """A bundle of hand-made hosts (state probes only), with its manifest."""
    bundle = root / "bundle"
    for host in hosts:
        ev = {
            FM: ProbeOutput("active\n", "", 0),
            "dmesg.txt": ProbeOutput("[    1.0] Linux version 6.8.0\n", "", 0),
        }
        pins = {"nvidia_fabricmanager_enabled": True}
        meta = {"host": host, "profile": PROFILE, "probes": "none", "pins": pins}
        write_host_bundle(bundle / host, ev, meta)
    write_manifest(bundle, "run-1", {})
    return bundle


def _node(doc: dict, host: str) -> dict:
    return next(n for n in doc["nodes"] if n["host"] == host)


def _reasons(node: dict) -> set[str]:
    return {f["reason"] for f in node["findings"]}


def _judged(node: dict) -> bool:
    """Its rules ran (each with its own reason), unlike a host refused as a whole."""
    return len(_reasons(node)) > 1


@pytest.fixture(scope="module")
def emu_bundle(tmp_path_factory) -> tuple[Path, str]:
    """A healthy emulated node certified at probe level none, whose dmesg carries one real
    hardware Xid: certify's verdict for it is FAIL (XID-001), and only that."""
    tmp = tmp_path_factory.mktemp("emu")
    node = full_node(tmp)
    opened = [
        Daemon(node, "nv-hostengine", "hostengine", "-n"),
        Daemon(node, "nvidia-persistenced", "persistenced", "--foreground"),
        Daemon(node, "nv-fabricmanager", "fabricmanager", "--foreground"),
    ]
    try:
        ev = emu_collect(node, tmp, "none")
    finally:
        for d in opened:
            d.__exit__()
    ev["dpkg-query_-W.txt"] = ProbeOutput(dpkg_line(), "", 0)
    ev["reboot-required.txt"] = ProbeOutput("", "", 0)
    xid = XID_CAPTURE.read_text()
    ev["dmesg.txt"] = ProbeOutput(ev["dmesg.txt"].stdout + xid, "", 0)
    meta = {"host": "emu1", "profile": PROFILE, "probes": "none", "pins": dict(STACK_VARS)}
    found = rules.evaluate(ev, rules.NodeContext("emu1", node.profile, STACK_VARS, meta))
    assert {f.rule for f in found if f.status not in ("PASS", "SKIPPED")} == {"XID-001"}
    bundle = tmp / "bundle"
    write_host_bundle(bundle / "emu1", ev, meta)
    write_manifest(bundle, "run-1", {"emu1": rules.verdict(found)})
    return bundle, xid


@pytest.fixture
def xid_bundle(emu_bundle, tmp_path) -> tuple[Path, str]:
    bundle, xid = emu_bundle
    copy = tmp_path / "bundle"
    shutil.copytree(bundle, copy)
    return copy, xid


# ---------------------------------------------------------------- manifest
def test_a_deleted_xid_line_never_turns_fail_into_pass(xid_bundle):
    bundle, xid = xid_bundle
    assert _node(evaluate_bundle(str(bundle)).to_dict(), "emu1")["verdict"] == "FAIL"
    dmesg = bundle / "emu1" / "dmesg.txt"
    dmesg.write_text(dmesg.read_text().replace(xid, ""))
    node = _node(evaluate_bundle(str(bundle)).to_dict(), "emu1")
    assert node["verdict"] == "ERROR"
    assert _reasons(node) == {"evidence changed since the run: dmesg.txt (changed)"}
    # judged as it is, the file is still shorter than the end marker gpuboot kept for it:
    # a cut file and a file with lines deleted look alike, and neither is PASS
    doc = evaluate_bundle(str(bundle), ignore_manifest=True).to_dict()
    assert doc["manifest"] == "ignored" and _node(doc, "emu1")["verdict"] == "ERROR"
    assert any("dmesg.txt: truncated" in r for r in _reasons(_node(doc, "emu1")))


def test_added_and_missing_files_and_a_deleted_host_are_changes(xid_bundle, tmp_path):
    bundle, _ = xid_bundle
    (bundle / "emu1" / "lsmod.txt").unlink()
    (bundle / "emu1" / "ibstat.txt.orig").write_text("planted\n")
    node = _node(evaluate_bundle(str(bundle)).to_dict(), "emu1")
    (reason,) = _reasons(node)
    assert "ibstat.txt.orig (added)" in reason and "lsmod.txt (missing)" in reason
    small = _small_bundle(tmp_path / "s")
    shutil.rmtree(small / "n2")
    doc = evaluate_bundle(str(small)).to_dict()
    assert _node(doc, "n2")["verdict"] == "ERROR" and not doc["passed"]
    assert "host directory missing" in next(iter(_reasons(_node(doc, "n2"))))


def test_hosts_of_the_run_come_from_the_manifest_never_from_outside(tmp_path):
    small = _small_bundle(tmp_path / "s")
    path = small / "MANIFEST.json"
    manifest = json.loads(path.read_text())
    manifest["hosts"] = {"n1": "PASS", "n2": "PASS", "gone": "ERROR", "..": "PASS"}
    manifest["files"]["../outside/x.txt"] = "0" * 64
    path.write_text(json.dumps(manifest))
    doc = evaluate_bundle(str(small)).to_dict()
    assert {n["host"] for n in doc["nodes"]} == {"n1", "n2", "gone"}
    # certify judged a host it could not collect from ERROR; so does evaluate
    assert _reasons(_node(doc, "gone")) == {"the run kept no evidence for this host (unreachable?)"}


def test_a_bundle_without_manifest_is_not_judged_unless_asked(xid_bundle):
    bundle, _ = xid_bundle
    (bundle / "MANIFEST.json").unlink()
    node = _node(evaluate_bundle(str(bundle)).to_dict(), "emu1")
    assert node["verdict"] == "ERROR"
    assert all("no MANIFEST.json" in r for r in _reasons(node))
    assert (
        _node(evaluate_bundle(str(bundle), ignore_manifest=True).to_dict(), "emu1")["verdict"]
        == "FAIL"
    )


def test_a_rules_subset_is_partial_never_pass(xid_bundle):
    bundle, xid = xid_bundle
    dmesg = bundle / "emu1" / "dmesg.txt"
    dmesg.write_text(dmesg.read_text().replace(xid, ""))  # a healthy node...
    meta_path = bundle / "emu1" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["outputs"]["dmesg.txt"]["bytes"] = dmesg.stat().st_size  # its end, as kept
    meta_path.write_text(json.dumps({**meta, "rules": ["GPU-001", "XID-001"]}))
    doc = evaluate_bundle(
        str(bundle), ignore_manifest=True
    ).to_dict()  # ...judged on two rules only
    node = _node(doc, "emu1")
    assert node["verdict"] == "ERROR" and doc["passed"] is False
    statuses = {f["rule"]: f["status"] for f in node["findings"]}
    assert statuses["GPU-001"] == statuses["XID-001"] == "PASS"
    rest = [f for f in node["findings"] if f["rule"] not in ("GPU-001", "XID-001")]
    assert rest and all(f["status"] == "ERROR" and "partial evidence" in f["reason"] for f in rest)


def test_manifest_does_not_follow_links_and_is_private(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("controller secret\n")
    bundle = tmp_path / "bundle"
    write_host_bundle(bundle / "n1", {"dmesg.txt": ProbeOutput("x\n", "", 0)}, {})
    os.symlink(secret, bundle / "n1" / "link.txt")
    os.symlink(tmp_path, bundle / "n1" / "linkdir")
    write_manifest(bundle, "run-1", {})
    manifest = json.loads((bundle / "MANIFEST.json").read_text())
    assert set(manifest["files"]) == {"n1/dmesg.txt", "n1/meta.json"}
    assert stat.S_IMODE((bundle / "MANIFEST.json").stat().st_mode) == 0o600
    assert stat.S_IMODE(bundle.stat().st_mode) == 0o700


# ---------------------------------------------------------------- what evaluate reads
def _evaluate_cli(bundle: Path, *extra: str, env=None) -> tuple[int, dict]:
    """`gpuboot evaluate` in a child: a hang (a FIFO) is a failure, not a stuck test run."""
    out = subprocess.run(
        [str(GPUBOOT), "evaluate", "--bundle", str(bundle), "--json", *extra],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    return out.returncode, json.loads(out.stdout)


def test_a_link_to_the_controllers_environment_is_never_read(xid_bundle):
    bundle, _ = xid_bundle
    link = bundle / "emu1" / FM  # FAB-001 quotes this file's text in its reason
    link.unlink()
    os.symlink("/proc/self/environ", link)
    env = {"H2_CANARY": "canary-5e1f0c", **os.environ}
    rc, doc = _evaluate_cli(bundle, "--ignore-manifest", env=env)
    assert "canary-5e1f0c" not in json.dumps(doc)
    assert rc == 1 and _node(doc, "emu1")["verdict"] == "ERROR"
    assert any(FM in r and "link" in r for r in _reasons(_node(doc, "emu1")))


@pytest.mark.parametrize("name", ["meta.json", "dmesg.txt"])
def test_a_fifo_makes_its_host_error_instead_of_hanging(tmp_path, name):
    bundle = _small_bundle(tmp_path)
    (bundle / "n1" / name).unlink()
    os.mkfifo(bundle / "n1" / name)
    rc, doc = _evaluate_cli(bundle, "--ignore-manifest")
    assert rc == 1 and _node(doc, "n1")["verdict"] == "ERROR"
    assert any(name in r for r in _reasons(_node(doc, "n1")))
    assert _judged(_node(doc, "n2"))


def test_a_linked_host_directory_is_not_followed(tmp_path):
    bundle = _small_bundle(tmp_path)
    elsewhere = _small_bundle(tmp_path / "other", hosts=("n3",)) / "n3"
    os.symlink(elsewhere, bundle / "n3")
    doc = evaluate_bundle(str(bundle), ignore_manifest=True).to_dict()
    assert _node(doc, "n3")["verdict"] == "ERROR"
    assert "link" in next(iter(_reasons(_node(doc, "n3"))))


def test_an_oversized_file_makes_only_its_host_error(tmp_path, monkeypatch):
    bundle = _small_bundle(tmp_path)
    monkeypatch.setattr(store, "MAX_FILE_BYTES", 4096)
    (bundle / "n1" / "dmesg.txt").write_bytes(b"x" * 5000)
    doc = evaluate_bundle(str(bundle), ignore_manifest=True).to_dict()
    assert _node(doc, "n1")["verdict"] == "ERROR"
    assert "over the 4096-byte cap" in next(iter(_reasons(_node(doc, "n1"))))
    assert _judged(_node(doc, "n2"))


@pytest.mark.parametrize(
    "meta_text",
    ["[1, 2, 3]", "not json", '"a string"', '{"pins": "x", "profile": "hgx-h100-sxm-8gpu"}'],
)
def test_a_malformed_meta_json_makes_its_host_error(tmp_path, meta_text):
    bundle = _small_bundle(tmp_path)
    (bundle / "n1" / "meta.json").write_text(meta_text)
    doc = evaluate_bundle(str(bundle), ignore_manifest=True).to_dict()
    assert _node(doc, "n1")["verdict"] == "ERROR"
    assert all("meta.json" in r for r in _reasons(_node(doc, "n1")))


def test_meta_json_size_is_bounded(tmp_path, monkeypatch):
    bundle = _small_bundle(tmp_path)
    monkeypatch.setattr(store, "MAX_META_BYTES", 100)
    doc = evaluate_bundle(str(bundle), ignore_manifest=True).to_dict()
    assert all("meta.json over" in next(iter(_reasons(n))) for n in doc["nodes"])


def _outside_profile(tmp_path: Path) -> Path:
    data = yaml.safe_load((PROFILE_DIR / f"{PROFILE}.yaml").read_text())
    out = tmp_path / "outside.yaml"
    out.write_text(yaml.safe_dump(data))
    return out


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink", "unknown-name"])
def test_profile_only_from_the_host_dir_or_shipped(tmp_path, how):
    bundle = _small_bundle(tmp_path)
    outside = _outside_profile(tmp_path)
    name = {
        "dotdot": "../../outside.yaml",
        "absolute": str(outside),
        "symlink": "variant.yaml",
        "unknown-name": "no-such-sku",
    }[how]
    if how == "symlink":
        os.symlink(outside, bundle / "n1" / "variant.yaml")
    meta_path = bundle / "n1" / "meta.json"
    meta_path.write_text(json.dumps({**json.loads(meta_path.read_text()), "profile": name}))
    doc = evaluate_bundle(str(bundle), ignore_manifest=True).to_dict()
    node = _node(doc, "n1")
    assert node["verdict"] == "ERROR"
    assert any(re.search("profile|link", r) for r in _reasons(node)), _reasons(node)


def test_a_profile_file_inside_the_host_dir_is_used(tmp_path):
    bundle = _small_bundle(tmp_path)
    data = yaml.safe_load((PROFILE_DIR / f"{PROFILE}.yaml").read_text())
    data["hardware"]["gpu"]["count"] = 3  # a SKU variant the bundle carries
    (bundle / "n1" / "variant.yaml").write_text(yaml.safe_dump(data))
    meta_path = bundle / "n1" / "meta.json"
    meta_path.write_text(
        json.dumps({**json.loads(meta_path.read_text()), "profile": "variant.yaml"})
    )
    node = _node(evaluate_bundle(str(bundle), ignore_manifest=True).to_dict(), "n1")
    gpu = next(f for f in node["findings"] if f["rule"] == "GPU-001")
    assert "profile" not in gpu["reason"]  # judged (missing csv: ERROR from the rule itself)
    # YAML aliases (an alias bomb) are refused in a bundle's own profile
    (bundle / "n1" / "variant.yaml").write_text("a: &x [1, 2]\nb: [*x, *x]\n")
    node = _node(evaluate_bundle(str(bundle), ignore_manifest=True).to_dict(), "n1")
    assert any("aliases" in r for r in _reasons(node))


def test_an_old_bundle_keeps_its_per_file_rc(tmp_path):
    """Bundles written before "outputs" kept rc/stderr under "probes": still read."""
    host = tmp_path / "n1"
    host.mkdir()
    (host / "dmesg.txt").write_text("x\n")
    (host / "meta.json").write_text(
        json.dumps({"probes": {"dmesg.txt": {"rc": 124, "stderr": "t"}}})
    )
    evidence, meta = read_host_bundle(host)
    assert evidence["dmesg.txt"].rc == 124 and "probes" not in meta


# ---------------------------------------------------------------- secrets
SECRETS = {
    "gpuboot_apt_mirror": "https://alice:hunter2-mirror@mirror.example.com/nvidia",
    "gpuboot_ngc_token": "nvapi-TOKEN-3f9c",
    "nvidia_registry_password": "pw-8d1e",
    "doca_ofed_repo_url": "https://bob:s3cr3t-ofed@repo.example.com/doca",
    "gpuboot_thresholds": {"warn_below": 0.85},
    "gpuboot_os_family": "debian",
}


def _fake_host(hostvars: dict, procfs: Path):
    def run(command: str):
        out = subprocess.run(["sh", "-c", command], capture_output=True, text=True)
        return SimpleNamespace(rc=out.returncode, stdout=out.stdout, stderr=out.stderr)

    return SimpleNamespace(
        backend=SimpleNamespace(NAME="ansible", get_hostname=lambda: "n1"),
        ansible=SimpleNamespace(get_variables=lambda: dict(hostvars)),
        run=run,
    )


def test_no_credential_token_or_password_reaches_the_bundle(tmp_path):
    hostvars = {**SECRETS, "gpuboot_procfs": str(tmp_path), "gpuboot_probes": "none"}
    entry = collect_node("n1", _fake_host(hostvars, tmp_path), hostvars)
    write_host_bundle(tmp_path / "bundle" / "n1", entry.evidence, entry.meta)
    files = (tmp_path / "bundle").rglob("*")
    text = "\n".join(p.read_text(errors="replace") for p in files if p.is_file())
    for leaked in ("hunter2-mirror", "nvapi-TOKEN-3f9c", "pw-8d1e", "s3cr3t-ofed"):
        assert leaked not in text
    pins = entry.meta["pins"]
    assert pins["gpuboot_thresholds"] == {"warn_below": 0.85}  # what the rules read stays
    assert set(pins) <= BUNDLE_VARS


def _rule_vars() -> set[str]:
    """Every host variable the rules (and the probe selection they judge by) read."""
    names: set[str] = set()
    srcs = [*(REPO / "gpuboot/checks").glob("*_rules.py"), REPO / "gpuboot/checks/rules.py"]
    srcs += [REPO / "gpuboot/checks/thresholds.py", REPO / "gpuboot/probes/__init__.py"]
    pattern = r"""(?:ctx\.var|ctx\.enabled|hostvars\.get|_absent\(ctx,)\(?\s*["']([a-z0-9_]+)"""
    for src in srcs:
        text = src.read_text()
        names |= set(re.findall(pattern, text))
        names |= set(re.findall(r"""hostvars\[["']([a-z0-9_]+)""", text))
    from gpuboot.components import components  # the pin lists and switches STK-002 reads

    names |= {v for c in components() if c.pinned for v in (f"{c.prefix}_packages", c.switch) if v}
    return names


def test_the_allow_list_holds_every_variable_the_rules_read():
    wanted = _rule_vars()
    assert {"nvidia_driver_version", "kernel_packages", "nvidia_mig_layout"} <= wanted
    assert wanted <= BUNDLE_VARS, wanted - BUNDLE_VARS


def test_a_host_directory_of_too_many_files_is_refused_before_any_is_read(tmp_path, monkeypatch):
    """A handed-in bundle's host of a million empty files held evaluate for minutes."""
    monkeypatch.setattr(store, "MAX_HOST_FILES", 50)
    host = tmp_path / "bundle" / "n1"
    write_host_bundle(host, {f"f{i}.txt": ProbeOutput("", "", 0) for i in range(50)}, {})
    read_calls = []
    monkeypatch.setattr(store, "read_file_capped", lambda p, cap=None: read_calls.append(p))
    with pytest.raises(store.BundleError, match="more than 50 files"):
        read_host_bundle(host)
    assert read_calls == []
