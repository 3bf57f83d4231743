"""`gpuboot certify` and `gpuboot evaluate`: verdicts per node from evidence.

certify runs the testinfra checks (gpuboot/checks/test_node.py) over SSH through
pytest, keeping the raw evidence as a bundle; evaluate re-judges a bundle offline
with the same rules, touching no host.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuboot import __version__, paths
from gpuboot.checks import rules
from gpuboot.errors import BadInput, RunError
from gpuboot.inventory import load_inventory
from gpuboot.profiles import load_profile

CHECKS = paths.PACKAGE_DIR / "checks" / "test_node.py"


class _Collector:
    """pytest plugin: folds each check's report into (host, rule) -> Finding."""

    def __init__(self) -> None:
        self.findings: dict[str, dict[str, rules.Finding]] = {}

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
            reason = str(exc) if exc else report.longreprtext.strip().splitlines()[-1]
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


def _manifest(bundle: Path, run_id: str, reports: list[dict]) -> None:
    files = {}
    for path in sorted(bundle.rglob("*")):
        if path.is_file() and path.name != "MANIFEST.json":
            files[str(path.relative_to(bundle))] = hashlib.sha256(path.read_bytes()).hexdigest()
    manifest = {
        "run_id": run_id,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpuboot": __version__,
        "hosts": {r["host"]: r["verdict"] for r in reports},
        "files": files,
    }
    (bundle / "MANIFEST.json").write_text(json.dumps(manifest, indent=2))


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
    run_id, run_dir = new_run_dir("certify")
    bundle = Path(bundle_root) / run_id if bundle_root else run_dir / "bundle"
    bundle.mkdir(parents=True, exist_ok=True)
    collector = _Collector()
    paths.put_venv_on_path()  # testinfra runs ansible-inventory by name
    args = [
        str(CHECKS),
        f"--hosts=ansible://{limit or 'all'}",
        f"--ansible-inventory={inv.path.resolve()}",
        f"--gpuboot-bundle={bundle}",
        *([f"--gpuboot-probes={probes}"] if probes else []),
        "-p",
        "no:cacheprovider",
        f"--rootdir={CHECKS.parent}",
        "-c",
        "/dev/null",
        "-q",
    ]
    progress(f"certify: collecting evidence and checking {len(inv.hosts)} host(s)")
    started = time.monotonic()
    _forget_testinfra_hosts()
    with open(run_dir / "pytest.log", "w") as log, contextlib.redirect_stdout(log):
        rc = pytest.main(args, plugins=[collector])
    if rc not in (0, 1) or not collector.findings:
        raise RunError(
            f"the check run broke (pytest exit {rc})",
            where=str(run_dir / "pytest.log"),
            hint="read the log; an empty --limit match also ends here",
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


def evaluate_bundle(bundle: str, *, profile: str | None = None) -> dict[str, Any]:
    """Judge a bundle offline: ``<bundle>/<host>/<probe-file>`` + meta.json per host."""
    from gpuboot.collect import read_host_bundle

    root = Path(bundle)
    if not root.is_dir():
        raise BadInput(
            "evidence bundle is not a directory",
            where=str(root),
            hint="pass the bundle path `gpuboot certify` printed",
        )
    host_dirs = sorted(p for p in root.iterdir() if p.is_dir())
    if not host_dirs:
        raise BadInput(
            "evidence bundle holds no host directories",
            where=str(root),
            hint="a bundle is <bundle>/<host>/<probe-file>",
        )
    fixed_profile = load_profile(profile) if profile else None
    reports = []
    for host_dir in host_dirs:
        evidence, meta = read_host_bundle(host_dir)
        node_profile = fixed_profile
        if node_profile is None:
            if not meta.get("profile"):
                raise BadInput(
                    "no profile recorded for this host",
                    where=str(host_dir / "meta.json"),
                    hint="pass --profile SKU",
                )
            # a bundle may carry its own profile file (a SKU variant), relative to the host
            local = host_dir / str(meta["profile"])
            node_profile = load_profile(local if local.is_file() else meta["profile"])
        ctx = rules.NodeContext(
            host=host_dir.name, profile=node_profile, hostvars=meta.get("pins", {}), meta=meta
        )
        # a partial bundle (e.g. real captures) names the rules it carries evidence for
        findings = rules.evaluate(evidence, ctx, meta.get("rules"))
        reports.append(_node_report(host_dir.name, findings))
    return {
        "bundle": str(root),
        "passed": all(r["verdict"] == rules.PASS for r in reports),
        "nodes": reports,
    }
