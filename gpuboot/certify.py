"""`gpuboot certify` and `gpuboot evaluate`: verdicts per node from evidence.

certify runs the engine (gpuboot/engine.py: collection over SSH, pair probes, the
bundle, the rules), keeping the raw evidence as a bundle; evaluate re-judges a bundle
offline with the same rules, touching no host.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuboot import engine
from gpuboot.bundle_meta import write_manifest as _manifest  # noqa: F401  (tests, sample bundles)
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
from gpuboot.engine import node_report as _node_report
from gpuboot.errors import BadInput, GpubootError
from gpuboot.inventory import Inventory
from gpuboot.profiles import list_profiles, load_profile
from gpuboot.profiles import validate as validate_profile


def certify(
    inventory: str | Path | Inventory,
    *,
    limit: str | None = None,
    bundle_root: str | None = None,
    progress: Callable[[str], None] = lambda _m: None,
    probes: str | None = None,
) -> dict[str, Any]:
    """Certify the inventory's nodes. ``probes`` (none|quick|full) overrides each host's
    ``gpuboot_probes`` (default quick): how much bandwidth measuring the run does."""
    from gpuboot.probes import LEVELS

    if probes is not None and probes not in LEVELS:
        raise BadInput(
            f"unknown probe level {probes!r}",
            where="--probes",
            hint=f"use one of: {', '.join(LEVELS)}",
        )
    result = engine.run(
        inventory, limit=limit, probes=probes, bundle_root=bundle_root, progress=progress
    )
    report = result.to_dict()
    (result.run_dir / "report.json").write_text(json.dumps(report, indent=2))
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
    _SHIPPED.clear()
    reports = _judge_hosts(root, sorted(hosts), fixed_profile, manifest)
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
    files: dict[str, dict[str, str]]  # host -> {file name: sha256}
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
    by_host: dict[str, dict[str, str]] = {}  # grouped once: a host's lookup is not a scan
    for rel, digest in files.items():
        host, sep, name = rel.partition("/")
        if sep:
            by_host.setdefault(host, {})[name] = digest
    names = set(by_host) | set(run_hosts)
    return _Manifest(by_host, frozenset(h for h in names if is_safe_name(h)))


def _listed(manifest: _Manifest, host: str) -> dict[str, str]:
    return manifest.files.get(host, {})


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


# Shipped profiles read in this evaluate run (cleared per run; forked workers inherit it).
_SHIPPED: dict[str, dict[str, Any]] = {}


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
        if name not in _SHIPPED:  # one copy per run, shared read-only like --profile's
            _SHIPPED[name] = load_profile(name)
        return _SHIPPED[name]
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


# Judging is CPU-bound and each host independent: a large bundle is judged on every core.
PARALLEL_FROM_HOSTS = 64


def _judge_hosts(
    root: Path,
    hosts: list[str],
    fixed_profile: dict[str, Any] | None,
    manifest: _Manifest | str | None,
) -> list[dict[str, Any]]:
    cores = len(os.sched_getaffinity(0))
    if len(hosts) < PARALLEL_FROM_HOSTS or cores < 2:
        return [_judge_host(root, h, fixed_profile, manifest) for h in hosts]
    from concurrent.futures import ProcessPoolExecutor

    def own(host: str) -> _Manifest | str | None:  # each worker gets its host's list only
        if isinstance(manifest, _Manifest):
            return _Manifest({host: _listed(manifest, host)}, frozenset({host}))
        return manifest

    jobs = [(root, h, fixed_profile, own(h)) for h in hosts]
    with ProcessPoolExecutor(max_workers=min(cores, 8)) as pool:
        return list(pool.map(_judge_job, jobs, chunksize=16))


def _judge_job(job: tuple) -> dict[str, Any]:
    return _judge_host(*job)


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
    return _node_report(host, _partial(evidence, ctx, _rules_of(evidence, meta)))


def _rules_of(evidence: Evidence, meta: dict[str, Any]) -> list[str] | None:
    """The rules a host's evidence is judged on: meta.json's list; all of them for a
    certify run's bundle (it records "outputs"); for a bundle of real tool outputs named
    after their commands and no list, the rules that read any file it holds (in any form)."""
    if meta.get("rules") or "outputs" in meta:
        return meta.get("rules")
    names = list(evidence)
    found = [
        r.id
        for r in rules.RULES
        if any(fnmatch.fnmatchcase(n, p) for p in r.evidence for n in names)
    ]
    return found or None


def _node_error(host: str, exc: GpubootError) -> dict[str, Any]:
    """Every rule ERROR with one short reason: the host's evidence could not be trusted."""
    action = exc.hint or "certify the node again for fresh evidence"
    findings = [
        rules.Finding(r.id, r.title, rules.ERROR, exc.message, action, r.severity)
        for r in rules.RULES
    ]
    return _node_report(host, findings)
