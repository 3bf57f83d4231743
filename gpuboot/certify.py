"""`gpuboot certify` and `gpuboot evaluate`: verdicts per node from evidence.

certify runs the engine (gpuboot/engine.py: collection over SSH, pair probes, the
bundle, the rules), keeping the raw evidence as a bundle; evaluate re-judges a bundle
offline with the same rules, touching no host.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuboot import engine, judging, paths
from gpuboot.bundle.manifest import NO_MANIFEST_HINT, Manifest, check_manifest, read_manifest
from gpuboot.bundle.model import BundleError, Evidence
from gpuboot.bundle.profile import SHIPPED, bundle_profile
from gpuboot.bundle.store import bundle_hosts, host_bundle, read_host_files
from gpuboot.checks import rules
from gpuboot.engine import node_report as _node_report
from gpuboot.errors import BadInput, GpubootError
from gpuboot.inventory import Inventory
from gpuboot.profiles import load_profile
from gpuboot.results import BundleReport, NodeReport, RunReport
from gpuboot.verdict import BAD


def certify(
    inventory: str | Path | Inventory,
    *,
    limit: str | None = None,
    bundle_root: str | None = None,
    progress: Callable[[str], None] = lambda _m: None,
    probes: str | None = None,
    verb: str = "certify",
    observe: engine.Observe | None = None,
) -> RunReport:
    """Certify the inventory's nodes. ``probes`` (none|quick|full) overrides each host's
    ``gpuboot_probes`` (default quick): how much bandwidth measuring the run does.
    ``verb``: the run's kind (``scan`` for a scan's run: kept, listed and pruned as one);
    ``observe``: see engine.run."""
    from gpuboot.probes import LEVELS

    if probes is not None and probes not in LEVELS:
        raise BadInput(
            f"unknown probe level {probes!r}",
            where="--probes",
            hint=f"use one of: {', '.join(LEVELS)}",
        )
    result = engine.run(
        inventory,
        limit=limit,
        probes=probes,
        bundle_root=bundle_root,
        progress=progress,
        verb=verb,
        observe=observe,
    )
    # whole or not at all: status and the timelines read kept reports while runs go on
    paths.write_private(result.run_dir / "report.json", json.dumps(result.to_dict(), indent=2))
    return result


def evaluate_bundle(
    bundle: str,
    *,
    profile: str | None = None,
    ignore_manifest: bool = False,
    pubkey: str | None = None,
) -> BundleReport:
    """Judge a bundle offline: ``<bundle>/<host>/<probe-file>`` + meta.json per host.

    A bundle left the controller's hands: each host is judged only on regular files inside
    its directory, within caps, and only while MANIFEST.json still vouches for them
    (unless ``ignore_manifest``); anything else makes that host ERROR, never the run.
    ``pubkey``: the certify key's public half: the manifest must be sealed with it and bind
    each host's directory to the hardware it shows (an unkeyed checksum can be recomputed
    by whoever edited the files)."""
    root = Path(bundle)
    if not root.is_dir():
        raise BadInput(
            "evidence bundle is not a directory",
            where=str(root),
            hint="pass the bundle path `gpuboot certify` printed",
        )
    manifest = None if ignore_manifest else read_manifest(root)
    key = None
    if pubkey is not None and isinstance(manifest, Manifest):
        from gpuboot.report.certificate import load_public_key
        from gpuboot.report.seal import seal_problem

        key = load_public_key(pubkey)
        if problem := seal_problem(root, key):
            manifest, key = f"{problem}: the evidence cannot be shown to be the run's", None
    hosts = set(bundle_hosts(root))
    if isinstance(manifest, Manifest):  # hosts of the run without a directory are reported
        hosts |= manifest.hosts
    if not hosts:
        raise BadInput(
            "evidence bundle holds no host directories",
            where=str(root),
            hint="a bundle is <bundle>/<host>/<probe-file>",
        )
    fixed_profile = load_profile(profile) if profile else None
    SHIPPED.clear()
    reports = _judge_hosts(root, sorted(hosts), fixed_profile, manifest, key)
    return BundleReport(
        bundle=str(root), manifest=_vouched(root, manifest, key), nodes=tuple(reports)
    )


def _vouched(root: Path, manifest: Manifest | str | None, key: Any) -> str:
    """What the manifest proved, in words."""
    if manifest is None:
        return "ignored"
    if not isinstance(manifest, Manifest):
        return manifest if manifest.startswith("bundle manifest") else "missing or unreadable"
    if key is not None:
        return "verified: sealed with the given key, each host bound to its hardware"
    from gpuboot.report.seal import seal_state

    return f"checksums verified; {seal_state(root)} (pass --pubkey to check the seal)"


def _partial(
    evidence: Evidence, ctx: rules.NodeContext, only: list[str] | None, hand_collected: bool
) -> list[rules.Finding]:
    """Every rule's finding; a bundle naming a subset of rules (real captures) is judged on
    those. A rule left out is SKIPPED "not judged" in a bundle of hand-collected outputs that
    holds none of its files (it did not run: nobody gave its output); else ERROR, as in a
    collected bundle, where a file it lacks went missing."""
    nothing = hand_collected and not only  # no file held feeds any rule
    judged = {} if nothing else {f.rule: f for f in rules.evaluate(evidence, ctx, only)}
    covered = ", ".join(judged) or "no rule"
    return [
        judged.get(rule.id)
        or (
            _not_in_bundle(rule, evidence if nothing else None)
            if hand_collected and not _holds(evidence, rule)
            else rules.Finding(
                rule.id,
                rule.title,
                rules.ERROR,
                f"not judged: partial evidence, the bundle covers only {covered}",
                "certify the node to judge every rule",
                rule.severity,
            )
        )
        for rule in rules.RULES
    ]


NOT_IN_BUNDLE = "not in the bundle"


def _holds(evidence: Evidence, rule: rules.Rule) -> bool:
    """Whether any file of the host is one the rule reads (in any of its forms)."""
    return any(fnmatch.fnmatchcase(n, p) for p in rule.evidence for n in evidence)


def _not_in_bundle(rule: rules.Rule, unread: Evidence | None) -> rules.Finding:
    """SKIPPED naming the files the rule reads; ``unread``: the host's files when none
    feeds any rule (the node has nothing to judge, so its verdict is ERROR)."""
    forms, more = rule.evidence, len(rule.evidence) - 3
    names = ", ".join(forms[:3]) + (f" or {more} other form{'s' * (more > 1)}" if more > 0 else "")
    reason = f"not judged: {names} {NOT_IN_BUNDLE}"
    if unread is not None:
        held = ", ".join(sorted(unread)[:5]) or "no output"
        reason += f"; nothing to judge: no rule reads {held}"
    return rules.Finding(
        rule.id,
        rule.title,
        rules.SKIPPED,
        reason,
        "add that output to the bundle, or certify the node to judge every rule",
        rule.severity,
    )


def _partial_verdict(report: NodeReport) -> NodeReport:
    """A bundle missing some rules' files is partial: what it holds may FAIL the node, but
    never pass it (ERROR: not everything was judged)."""
    if report.verdict in BAD or not any(
        f.status == rules.SKIPPED and NOT_IN_BUNDLE in f.reason for f in report.findings
    ):
        return report
    return replace(report, verdict=rules.ERROR)


# Judging is CPU-bound and each host independent: a large bundle is judged on every core,
# each host in a worker ended at its deadline. So is a bundle with a heavy host: a bundle
# is data from outside, and one host's evidence must not hold the others' verdicts.
PARALLEL_FROM_HOSTS = 64
HEAVY_HOST_BYTES = 4 << 20  # real captures hold well under 1 MiB a host


def _judge_hosts(
    root: Path,
    hosts: list[str],
    fixed_profile: dict[str, Any] | None,
    manifest: Manifest | str | None,
    key: Any = None,
) -> list[NodeReport]:
    cores = len(os.sched_getaffinity(0))
    large = len(hosts) >= PARALLEL_FROM_HOSTS and cores >= 2
    if not large and not any(_heavy(root / h) for h in hosts):
        return [_judge_host(root, h, fixed_profile, manifest, key) for h in hosts]
    reports = judging.judge_within_deadlines(
        {h: functools.partial(_judge_host, root, h, fixed_profile, manifest, key) for h in hosts},
        lambda _host: engine.JUDGE_DEADLINE_S,
        _node_error,
    )
    return [reports[h] for h in hosts]


def _heavy(host_dir: Path) -> bool:
    """More than HEAVY_HOST_BYTES in the host directory's regular files (links not
    followed; what cannot be listed is left to the reader, which says why)."""
    try:
        with os.scandir(host_dir) as entries:
            sizes = (
                e.stat(follow_symlinks=False).st_size
                for e in entries
                if e.is_file(follow_symlinks=False)
            )
            return sum(sizes) > HEAVY_HOST_BYTES
    except OSError:
        return False


def _judge_host(
    root: Path,
    host: str,
    fixed_profile: dict[str, Any] | None,
    manifest: Manifest | str | None,
    key: Any = None,
) -> NodeReport:
    host_dir = root / host
    try:
        if isinstance(manifest, Manifest) and not os.path.lexists(host_dir):
            if not manifest.listed(host):  # certify judged it ERROR too
                raise BundleError("the run kept no evidence for this host (unreachable?)")
            raise BundleError(
                "evidence changed since the run: host directory missing", hint=NO_MANIFEST_HINT
            )
        files = read_host_files(host_dir)
        if manifest is not None:
            check_manifest(manifest, host, files)
        if key is not None:  # a sealed manifest: the directory is this host's hardware
            from gpuboot.report.seal import seal_problem

            if problem := seal_problem(root, key, host):
                raise BundleError(problem, hint=NO_MANIFEST_HINT)
        evidence, meta = host_bundle(files, str(host_dir))
        node_profile = fixed_profile or bundle_profile(host, meta, files)
    except GpubootError as exc:  # this host's evidence is not judged; the others are
        return _node_error(host, exc)
    ctx = rules.NodeContext(
        host=host, profile=node_profile, hostvars=meta.get("pins") or {}, meta=meta
    )
    # Hand-collected: no manifest vouches for the files and gpuboot's collection (which
    # records "outputs") did not write them; only there is a file absent "not given".
    hand_collected = manifest is None and "outputs" not in meta
    findings = _partial(evidence, ctx, _rules_of(evidence, meta), hand_collected)
    report = _partial_verdict(_node_report(host, findings))
    collected_by = meta.get("executor")  # who collected the evidence, as certify recorded
    return replace(report, executor=collected_by) if isinstance(collected_by, str) else report


def _rules_of(evidence: Evidence, meta: dict[str, Any]) -> list[str] | None:
    """The rules a host's evidence is judged on: meta.json's list; all of them for a
    certify run's bundle (it records "outputs"); for a bundle of real tool outputs named
    after their commands and no list, the rules that read any file it holds (in any form)."""
    if meta.get("rules") or "outputs" in meta:
        return meta.get("rules")
    found = [r.id for r in rules.RULES if _holds(evidence, r)]
    return found or None


def _node_error(host: str, exc: GpubootError) -> NodeReport:
    """Every rule ERROR with one short reason: the host's evidence could not be trusted."""
    action = exc.hint or "certify the node again for fresh evidence"
    findings = [
        rules.Finding(r.id, r.title, rules.ERROR, exc.message, action, r.severity)
        for r in rules.RULES
    ]
    return _node_report(host, findings)
