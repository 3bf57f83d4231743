"""`gpuboot certify` and `gpuboot evaluate`: verdicts per node from evidence.

certify runs the testinfra checks (gpuboot/checks/test_node.py) over SSH through
pytest, keeping the raw evidence as a bundle; evaluate re-judges a bundle offline
with the same rules, touching no host.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuboot import __version__, paths
from gpuboot.checks import rules
from gpuboot.collect import (
    MANIFEST,
    META,
    BundleError,
    Evidence,
    host_bundle,
    is_safe_name,
    read_file_capped,
    read_host_files,
)
from gpuboot.errors import BadInput, GpubootError, RunError
from gpuboot.inventory import load_inventory, select_hosts
from gpuboot.profiles import list_profiles, load_profile
from gpuboot.profiles import validate as validate_profile
from gpuboot.runner import failure_reason, last_line

CHECKS = paths.PACKAGE_DIR / "checks" / "test_node.py"


class _Collector:
    """pytest plugin: folds each check's report into (host, rule) -> Finding."""

    def __init__(self) -> None:
        self.findings: dict[str, dict[str, rules.Finding]] = {}
        self.interrupted = False  # Ctrl-C: pytest catches it and returns exit 2

    def pytest_keyboard_interrupt(self, excinfo) -> None:
        self.interrupted = excinfo.errisinstance(KeyboardInterrupt)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        params = getattr(getattr(item, "callspec", None), "params", {})
        host, rule_id = params.get("_testinfra_host"), params.get("rule_id")
        if host is None or rule_id is None or report.when == "teardown":
            return
        name = host.backend.get_hostname()
        rule = rules.RULES_BY_ID[rule_id]
        recorded = dict(report.user_properties).get("finding")
        if recorded:
            self.findings.setdefault(name, {})[rule_id] = rules.Finding(**recorded)
        elif report.failed:  # the rule or its evidence raised: the harness could not judge
            exc = call.excinfo.value if call.excinfo else None
            # one short line: an unreachable node's 27 findings each carry it
            reason = failure_reason(exc) if exc else last_line(report.longreprtext)
            self.findings.setdefault(name, {})[rule_id] = rules.Finding(
                rule.id,
                rule.title,
                rules.ERROR,
                f"cannot judge: {reason}",
                "fix the harness or reach the node, then certify again",
            )


def _node_report(host: str, findings: list[rules.Finding]) -> dict[str, Any]:
    """Findings as {rule,title,status,reason,action,severity,applicable}; every measured
    figure (median, band, margin, % of the physical limit) in ``measurements``."""
    out, measurements = [], []
    for f in findings:
        d = dict(f.__dict__)
        measurements += [{**m, "rule": f.rule} for m in d.pop("measurements", [])]
        out.append(d)
    return {
        "host": host,
        "verdict": rules.verdict(findings),
        "findings": out,
        "measurements": measurements,
    }


def _sha256_file(path: Path) -> str | None:
    """The file's sha256, or None for anything but a regular file (never through a link)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        digest = hashlib.sha256()
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _manifest(bundle: Path, run_id: str, reports: list[dict]) -> None:
    """MANIFEST.json: every regular file's sha256 (links are not followed nor listed:
    evaluate refuses them), written 0600; the bundle tree stays the operator's (0700)."""
    files = {}
    for top, dirs, names in os.walk(bundle):  # never descends through a linked directory
        dirs.sort()
        for name in sorted(names):
            rel = str((Path(top) / name).relative_to(bundle))
            if rel != MANIFEST and (digest := _sha256_file(Path(top) / name)) is not None:
                files[rel] = digest
    manifest = {
        "run_id": run_id,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpuboot": __version__,
        "hosts": {r["host"]: r["verdict"] for r in reports},
        "files": files,
    }
    paths.private_dir(bundle)
    paths.write_private(bundle / MANIFEST, json.dumps(manifest, indent=2))


def _forget_testinfra_hosts() -> None:
    """testinfra keeps its hosts and the inventory variables it read per inventory path
    for the life of the process: a second run in one process (a library caller, a test)
    would judge against the variables of the first. Start each run from the file."""
    from testinfra.host import Host
    from testinfra.utils.ansible_runner import AnsibleRunner

    AnsibleRunner._runners.clear()
    Host._host_cache.clear()
    Host._hosts_cache.clear()


def certify(
    inventory: str,
    *,
    limit: str | None = None,
    bundle_root: str | None = None,
    progress: Callable[[str], None] = lambda _m: None,
    probes: str | None = None,
) -> dict[str, Any]:
    """Certify the inventory's nodes. ``probes`` (none|quick|full) overrides each host's
    ``gpuboot_probes`` (default quick): how much bandwidth measuring the run does."""
    from gpuboot.probes import LEVELS
    from gpuboot.runner import new_run_dir

    if probes is not None and probes not in LEVELS:
        raise BadInput(
            f"unknown probe level {probes!r}",
            where="--probes",
            hint=f"use one of: {', '.join(LEVELS)}",
        )

    inv = load_inventory(inventory)  # profiles, pins and stacks checked before any SSH
    hosts = select_hosts(inv, limit)  # Ansible's reading of --limit, before any run dir
    run_id, run_dir = new_run_dir("certify")
    bundle = Path(bundle_root) / run_id if bundle_root else run_dir / "bundle"
    bundle.mkdir(parents=True, exist_ok=True)
    collector = _Collector()
    paths.put_venv_on_path()  # testinfra runs ansible-inventory by name
    args = [
        str(CHECKS),
        # One exact host per spec: testinfra splits --hosts at commas and matches each
        # with fnmatch, so a pattern handed over as it came would mean something else.
        "--hosts=" + ",".join(f"ansible://{h}" for h in hosts),
        f"--ansible-inventory={inv.path}",
        f"--gpuboot-bundle={bundle}",
        *([f"--gpuboot-probes={probes}"] if probes else []),
        "-p",
        "no:cacheprovider",
        f"--rootdir={CHECKS.parent}",
        "-c",
        "/dev/null",
        "-q",
    ]
    progress(f"certify: collecting evidence and checking {len(hosts)} host(s)")
    started = time.monotonic()
    _forget_testinfra_hosts()
    with open(run_dir / "pytest.log", "w") as log, contextlib.redirect_stdout(log):
        rc = pytest.main(args, plugins=[collector])
    if collector.interrupted:
        raise KeyboardInterrupt(f"certify stopped before a verdict; its log: {run_dir}/pytest.log")
    if rc not in (0, 1) or not collector.findings:
        raise RunError(
            f"the check run broke (pytest exit {rc})",
            where=str(run_dir / "pytest.log"),
            hint="read the log",
        )
    reports = [_node_report(h, list(f.values())) for h, f in sorted(collector.findings.items())]
    _manifest(bundle, run_id, reports)
    report = {
        "run_id": run_id,
        "run_dir": str(run_dir),
        "bundle": str(bundle),
        "elapsed_s": round(time.monotonic() - started, 2),
        "passed": all(r["verdict"] == rules.PASS for r in reports),
        "probes": probes,
        "nodes": reports,
    }
    (run_dir / "report.json").write_text(json.dumps(report, indent=2))
    return report


def evaluate_bundle(
    bundle: str, *, profile: str | None = None, ignore_manifest: bool = False
) -> dict[str, Any]:
    """Judge a bundle offline: ``<bundle>/<host>/<probe-file>`` + meta.json per host.

    A bundle left the controller's hands: each host is judged only on regular files inside
    its directory, within caps, and only while MANIFEST.json still vouches for them
    (unless ``ignore_manifest``); anything else makes that host ERROR, never the run."""
    root = Path(bundle)
    if not root.is_dir():
        raise BadInput(
            "evidence bundle is not a directory",
            where=str(root),
            hint="pass the bundle path `gpuboot certify` printed",
        )
    manifest = None if ignore_manifest else _read_manifest(root)
    hosts = set(_bundle_hosts(root))
    if isinstance(manifest, _Manifest):  # hosts of the run without a directory are reported
        hosts |= manifest.hosts
    if not hosts:
        raise BadInput(
            "evidence bundle holds no host directories",
            where=str(root),
            hint="a bundle is <bundle>/<host>/<probe-file>",
        )
    fixed_profile = load_profile(profile) if profile else None
    reports = [_judge_host(root, h, fixed_profile, manifest) for h in sorted(hosts)]
    return {
        "bundle": str(root),
        "manifest": "ignored"
        if ignore_manifest
        else ("verified" if isinstance(manifest, _Manifest) else "missing or unreadable"),
        "passed": all(r["verdict"] == rules.PASS for r in reports),
        "nodes": reports,
    }


_NO_MANIFEST_HINT = "re-certify the node, or pass --ignore-manifest to judge the bundle as it is"
MAX_PROFILE_BYTES = 1024 * 1024


def _bundle_hosts(root: Path) -> list[str]:
    """Entries that stand for a host: directories, and links (refused when judged)."""
    try:
        names = sorted(os.listdir(root))
    except OSError as exc:
        raise BadInput(f"cannot list the bundle ({exc.strerror})", where=str(root)) from None
    out = []
    for name in names:
        with contextlib.suppress(OSError):  # gone since the listing: not a host
            if stat.S_ISDIR(os.lstat(root / name).st_mode) or os.path.islink(root / name):
                out.append(name)
    return out


@dataclass(frozen=True)
class _Manifest:
    files: dict[str, str]  # relative path -> sha256
    hosts: frozenset[str]  # every host of the run, with or without evidence kept


def _read_manifest(root: Path) -> _Manifest | str:
    """MANIFEST.json, or why it cannot vouch for the bundle."""
    path = root / MANIFEST
    if not os.path.lexists(path):
        return (
            "the bundle has no MANIFEST.json: its evidence cannot be shown unchanged since the run"
        )
    try:
        doc = json.loads(read_file_capped(path))
    except BundleError as exc:
        return f"MANIFEST.json unreadable: {exc.message}"
    except (ValueError, RecursionError) as exc:
        return f"MANIFEST.json is not valid JSON ({exc})"
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        return "MANIFEST.json is malformed: no files {path: sha256} mapping"
    run_hosts = doc.get("hosts") if isinstance(doc.get("hosts"), dict) else {}
    names = {k.split("/", 1)[0] for k in files if "/" in k} | set(run_hosts)
    return _Manifest(files, frozenset(h for h in names if is_safe_name(h)))


def _listed(manifest: _Manifest, host: str) -> dict[str, str]:
    prefix = host + "/"
    return {k.removeprefix(prefix): v for k, v in manifest.files.items() if k.startswith(prefix)}


def _check_manifest(manifest: _Manifest | str, host: str, files: dict[str, bytes]) -> None:
    if isinstance(manifest, str):
        raise BundleError(manifest, hint=_NO_MANIFEST_HINT)
    listed = _listed(manifest, host)
    problems = [f"{n} (added)" for n in sorted(set(files) - set(listed))]
    problems += [f"{n} (missing)" for n in sorted(set(listed) - set(files))]
    problems += [
        f"{n} (changed)"
        for n in sorted(set(files) & set(listed))
        if hashlib.sha256(files[n]).hexdigest() != listed[n]
    ]
    if problems:
        raise BundleError(
            f"evidence changed since the run: {', '.join(problems)}", hint=_NO_MANIFEST_HINT
        )


class _NoAliasLoader(yaml.SafeLoader):
    """A bundle's own profile is untrusted YAML: no aliases (no alias bomb)."""

    def compose_node(self, parent, index):  # type: ignore[no-untyped-def]
        if self.check_event(yaml.events.AliasEvent):
            raise yaml.YAMLError("YAML aliases are not accepted in a bundle's profile")
        return super().compose_node(parent, index)


def _bundle_profile(host: str, meta: dict[str, Any], files: dict[str, bytes]) -> dict[str, Any]:
    """meta.json's profile: a file of this host directory (a SKU variant) or a shipped
    profile by name; never a path elsewhere on the controller."""
    name = meta.get("profile")
    hint = "pass --profile SKU"
    if not name or not isinstance(name, str):
        raise BundleError("no profile recorded for this host in meta.json", hint=hint)
    if name in files and name != META:
        where = f"{host}/{name}"
        if len(files[name]) > MAX_PROFILE_BYTES:
            raise BundleError(f"profile {where} over {MAX_PROFILE_BYTES} bytes", hint=hint)
        try:
            data = yaml.load(files[name], Loader=_NoAliasLoader)  # a SafeLoader
        except (yaml.YAMLError, RecursionError, ValueError) as exc:
            raise BundleError(f"profile {where} is not valid YAML ({exc})", hint=hint) from None
        return validate_profile(data, where)
    if name in list_profiles():
        return load_profile(name)
    raise BundleError(
        f"profile {name!r} is neither a file in this host directory nor a shipped profile",
        hint=hint,
    )


def _partial(
    evidence: Evidence, ctx: rules.NodeContext, only: list[str] | None
) -> list[rules.Finding]:
    """Every rule's finding; a bundle naming a subset of rules (real captures) is judged on
    those, the others are ERROR: partial evidence never makes a node PASS."""
    judged = {f.rule: f for f in rules.evaluate(evidence, ctx, only)}
    covered = ", ".join(judged) or "no rule"
    return [
        judged.get(rule.id)
        or rules.Finding(
            rule.id,
            rule.title,
            rules.ERROR,
            f"not judged: partial evidence, the bundle covers only {covered}",
            "certify the node to judge every rule",
            rule.severity,
        )
        for rule in rules.RULES
    ]


def _judge_host(
    root: Path,
    host: str,
    fixed_profile: dict[str, Any] | None,
    manifest: _Manifest | str | None,
) -> dict[str, Any]:
    host_dir = root / host
    try:
        if isinstance(manifest, _Manifest) and not os.path.lexists(host_dir):
            if not _listed(manifest, host):  # certify judged it ERROR too
                raise BundleError("the run kept no evidence for this host (unreachable?)")
            raise BundleError(
                "evidence changed since the run: host directory missing", hint=_NO_MANIFEST_HINT
            )
        files = read_host_files(host_dir)
        if manifest is not None:
            _check_manifest(manifest, host, files)
        evidence, meta = host_bundle(files, str(host_dir))
        node_profile = fixed_profile or _bundle_profile(host, meta, files)
    except GpubootError as exc:  # this host's evidence is not judged; the others are
        return _node_error(host, exc)
    ctx = rules.NodeContext(
        host=host, profile=node_profile, hostvars=meta.get("pins") or {}, meta=meta
    )
    return _node_report(host, _partial(evidence, ctx, meta.get("rules")))


def _node_error(host: str, exc: GpubootError) -> dict[str, Any]:
    """Every rule ERROR with one short reason: the host's evidence could not be trusted."""
    action = exc.hint or "certify the node again for fresh evidence"
    findings = [
        rules.Finding(r.id, r.title, rules.ERROR, exc.message, action, r.severity)
        for r in rules.RULES
    ]
    return _node_report(host, findings)
