"""The gpuboot command line: the only place that prints for humans and exits.

Exit codes: 0 all good; 1 a node failed (verdict FAIL/ERROR or a failed host);
2 bad input (usage, config, inventory, stack); 3 the run itself broke.
Heavy modules (ansible, ansible_runner, testinfra) are imported inside the verbs so
`gpuboot --help` stays quick.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, ClassVar

from gpuboot import __version__
from gpuboot.errors import EXIT_BAD_INPUT, EXIT_NODE_FAILED, EXIT_OK, BadInput, GpubootError


class Outcome:
    """What a verb hands back: an exit code, a JSON document and the human text."""

    def __init__(self, code: int, doc: dict[str, Any], text: str = ""):
        self.code, self.doc, self.text = code, doc, text


def _err(msg: str) -> None:
    from gpuboot.ui import printable

    sys.stderr.write(printable(msg) + "\n")
    sys.stderr.flush()


def _progress(args) -> Any:
    return (
        (lambda msg: _err(f"gpuboot: {msg}"))
        if not getattr(args, "quiet", False)
        else (lambda _msg: None)
    )


# ---------------------------------------------------------------- other distributions' verbs
LAB_MISSING = "the lab is not installed: pip install 'gpuboot[lab]'"


def _add_plugin_verbs(verbs, common: argparse.ArgumentParser) -> None:
    """Verbs that live outside the product (the lab's `gpuboot lab ...`), found through
    the entry point group ``gpuboot.verbs``: the product never imports the lab."""
    from importlib.metadata import entry_points

    added = set()
    for ep in entry_points(group="gpuboot.verbs"):
        try:
            register = ep.load()
        except ImportError:  # declared by an install whose code is gone: as if absent
            continue
        register(verbs, common)
        added.add(ep.name)
    if "lab" not in added:
        stub = verbs.add_parser("lab", help="a simulated GPU fleet (not installed)")
        stub.add_argument("rest", nargs=argparse.REMAINDER)
        stub.set_defaults(func=_lab_missing)


def _lab_missing(_args) -> Outcome:
    raise BadInput(LAB_MISSING, hint="the lab also needs podman and debootstrap (make setup)")


# ---------------------------------------------------------------- install
def cmd_install(args) -> Outcome:
    from gpuboot import install
    from gpuboot.progress import live_install
    from gpuboot.ui import host_table

    if args.drain_timeout <= 0:
        raise BadInput(
            f"--drain-timeout {args.drain_timeout:g} must be a positive number of seconds",
            hint="e.g. --drain-timeout 900",
        )
    drain = None
    if args.kubeconfig:
        drain = install.Drain(args.kubeconfig, args.k8s_context, args.drain_timeout)
    with live_install(sys.stderr, quiet=args.quiet, verbose=args.verbose) as live:
        result = install.install(
            args.inventory,
            limit=args.limit,
            tags=tuple(args.tags or ()),
            forks=args.forks,
            strategy=args.strategy,
            check=args.check,
            diff=args.diff,
            serial=args.serial,
            max_fail=args.max_fail,
            resume=args.resume,
            allow_reboot=args.allow_reboot,
            full=args.full,
            drain=drain,
            progress=live,
            warn=lambda msg: _err(f"gpuboot: {msg}"),  # shown even with -q
        )
    rollout = result.rollout
    if not result.hosts:
        text = f"nothing to resume: every host of run {result.resumed_from} converged"
        return Outcome(EXIT_OK, result.to_dict(), text)
    text = host_table(result.hosts)  # failures first, identical results folded
    batches = -(-len(rollout.hosts) // rollout.batch_size)
    text += (
        f"\n{len(result.hosts)} host(s) in {batches} batch(es), {result.elapsed_s:.1f}s;"
        f" run dir {result.run_dir}"
    )
    for d in result.drained.values():
        if d.error:
            what = d.error
        elif not d.member:
            what = "not in the cluster: nothing to drain"
        else:
            what = f"cordoned and drained ({len(d.evicted)} pod(s) evicted); back after certify"
        text += f"\nk8s {d.node}: {what}"
    if result.would_drain:
        text += f"\nwould cordon and drain (stack changes): {', '.join(result.would_drain)}"
    if rollout.stopped:
        text += f"\nrollout stopped: {rollout.stopped}"
    if rollout.failed or rollout.pending:
        text += f"\nonce fixed: gpuboot install -i {args.inventory} --resume {result.run_id}"
    if result.diff is not None:  # --diff: the differences per change set, then the table
        from gpuboot import diffview

        text = (
            f"{diffview.render(result.diff, check=args.check)}\n\n{text}\n"
            f"{diffview.summary(result.diff, check=args.check)}; "
            f"whole diff: {result.run_dir / diffview.FILE_NAME}"
        )
    code = EXIT_NODE_FAILED if rollout.failed or rollout.pending else EXIT_OK
    return Outcome(code, result.to_dict(), text)


# ---------------------------------------------------------------- matrix / plan / mirror
def cmd_matrix(args) -> Outcome:
    from gpuboot import matrix
    from gpuboot.ui import table

    if args.action == "list":
        rows = matrix.list_all()
        text = table(
            ("stack", "driver", "cuda", "doca-ofed", "profiles", "violations"),
            [
                (
                    r["stack"],
                    r["driver"],
                    r["cuda"],
                    r["doca_ofed"] or "-",
                    ",".join(r["profiles"]),
                    r["violations"],
                )
                for r in rows
            ],
        )
        return Outcome(EXIT_OK, {"stacks": rows}, text)
    if not args.stack:
        raise BadInput(
            f"`gpuboot matrix {args.action}` needs a stack name or file",
            hint="`gpuboot matrix list` shows the shipped stacks",
        )
    if args.action == "show":
        doc = matrix.show(args.stack, args.os_family)
        text = f"{doc['stack']}: {doc['description']}\n" + table(
            ("component", "version", "packages"),
            [
                (
                    c["component"],
                    c["version"] if c["enabled"] else "(disabled)",
                    " ".join(c["packages"]),
                )
                for c in doc["components"]
            ],
        )
        return Outcome(EXIT_OK, doc, text)
    doc = matrix.check(args.stack, args.profile)
    if not doc["violations"]:
        return Outcome(
            EXIT_OK,
            doc,
            f"{doc['stack']}: compatible with "
            f"{', '.join(p or 'any profile' for p in doc['profiles'])}",
        )
    text = "\n".join(
        f"{v['rule']} {v['where']}: {v['message']}\n    fix: {v['fix']}\n    source: {v['source']}"
        for v in doc["violations"]
    )
    if doc["rules_not_checked"]:
        text += (
            "\ncompatibility rules not checked (not judged: each needs a value with a schema "
            f"fault): {', '.join(doc['rules_not_checked'])}"
        )
    return Outcome(EXIT_BAD_INPUT, doc, text)


def cmd_plan(args) -> Outcome:
    from gpuboot import plan

    doc = plan.plan(args.inventory, limit=args.limit)
    failed = any("error" in n for n in doc["nodes"])
    return Outcome(EXIT_NODE_FAILED if failed else EXIT_OK, doc, plan.render(doc))


def cmd_mirror(args) -> Outcome:
    from gpuboot import matrix

    doc = matrix.mirror(
        args.stack, args.os_family, args.repo or (), args.probe_tools or (), args.arch
    )
    sep = "=" if args.os_family == "debian" else "-"
    text = "\n".join(f"{p['name']}{sep}{p['version']}" for p in doc["packages"])
    if doc["scope"] == "top-level":
        if not args.quiet:  # stderr: stdout stays one NAME=VERSION per line
            _err("gpuboot: top-level packages only, not their dependencies: give --repo")
        return Outcome(EXIT_OK, doc, text)
    pinned = sum(p["pinned"] for p in doc["packages"])
    text += (
        f"\nclosure: {len(doc['packages'])} package(s), {pinned} pinned and "
        f"{len(doc['packages']) - pinned} dependencies, from {', '.join(doc['repositories'])}"
    )
    for u in doc["unsatisfied"]:
        text += f"\nUNSATISFIED {u['package']} {u['version']} needs {u['needs']}: {u['reason']}"
    return Outcome(EXIT_NODE_FAILED if doc["unsatisfied"] else EXIT_OK, doc, text)


def cmd_runs(args) -> Outcome:
    from gpuboot import runs
    from gpuboot.ui import table

    if args.runs_action == "prune":
        age = runs.parse_age(args.older_than) if args.older_than else None
        doc = runs.prune(keep=args.keep, older_than=age, dry_run=args.dry_run)
        verb = "would free" if args.dry_run else "freed"
        done = "would remove" if args.dry_run else "removed"
        lines = [f"{done} {r['id']}" for r in doc["removed"]]
        lines += [f"kept {k['id']}: {k['why']}" for k in doc["kept"] if k["why"] == "in progress"]
        lines.append(
            f"{verb} {runs.human_size(doc['freed_bytes'])} in {len(doc['removed'])} run(s);"
            f" {len(doc['kept'])} kept in {doc['root']}"
        )
        return Outcome(EXIT_OK, doc, "\n".join(lines))
    found = runs.list_runs()
    rows = [
        (
            r.id,
            r.verb,
            runs.human_size(r.size),
            "in progress" if r.in_progress else ("newest" if r.newest else ""),
        )
        for r in found
    ]
    total = runs.human_size(sum(r.size for r in found))
    text = table(("run", "verb", "size", "state"), rows) + f"\n{len(found)} run(s), {total}"
    return Outcome(EXIT_OK, {"runs": [r.to_dict() for r in found]}, text)


def cmd_help(args) -> Outcome:
    from gpuboot.completion import help_text

    text = help_text(args.root, args.words)
    return Outcome(EXIT_OK, {"help": text}, text)


def cmd_completion(args) -> Outcome:
    from gpuboot.completion import SHELLS

    return Outcome(EXIT_OK, {}, SHELLS[args.shell](args.root))


# ---------------------------------------------------------------- certify / evaluate
def _not_passed(node: dict[str, Any]) -> list[dict[str, Any]]:
    """Findings judged other than PASS, the verdict's own first (SKIPPED ones did not run)."""
    judged = [f for f in node["findings"] if f["status"] not in ("PASS", "SKIPPED")]
    return sorted(judged, key=lambda f: f["status"] != node["verdict"])


def _checks_summary(node: dict[str, Any]) -> str:
    statuses = [f["status"] for f in node["findings"]]
    passed, skipped = statuses.count("PASS"), statuses.count("SKIPPED")
    if not passed and node["verdict"] == "ERROR":
        return f"nothing was checked: {skipped} check(s) skipped"
    return f"{passed} passed, {skipped} skipped" if skipped else f"{passed} checks passed"


def _by_reason(findings: list[dict[str, Any]]) -> dict[tuple[str, str], list[str]]:
    """(status, reason) -> the rules (with their titles when alone) that share it: a node
    whose evidence could not be read says so once, not once per rule."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for f in findings:
        groups.setdefault((f["status"], f["reason"]), []).append(f)
    return {
        key: [f"{fs[0]['rule']} {fs[0]['title']}"] if len(fs) == 1 else [f["rule"] for f in fs]
        for key, fs in groups.items()
    }


def _skipped_text(nodes: list[dict[str, Any]], named: int = 5) -> str:
    """Checks that did not run, once per rule and reason with the nodes they concern: the
    same skip on 300 nodes is one line, not 300."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for node in nodes:
        for f in node["findings"]:
            if f["status"] == "SKIPPED":
                groups.setdefault((f["rule"], f["title"], f["reason"]), []).append(node["host"])
    lines = []
    for (rule, title, reason), hosts in groups.items():
        on = ", ".join(hosts) if len(hosts) <= named else f"{len(hosts)} nodes"
        lines.append(f"\n  SKIPPED {rule} {title}: {reason} ({on})")
    return "".join(lines)


def _remediate_text(nodes: list[dict[str, Any]], named: int = 5) -> str:
    """Per failed rule that tasks make true, the install that runs them alone (ids.link_report
    put it in the findings), once with the nodes it concerns."""
    groups: dict[str, list[str]] = {}
    for node in nodes:
        for f in node["findings"]:
            if f.get("remediate"):
                groups.setdefault(f["remediate"], []).append(node["host"])
    lines = []
    for command, hosts in groups.items():
        on = ", ".join(hosts) if len(hosts) <= named else f"{len(hosts)} nodes"
        lines.append(f"\n  remediate: {command} on {on}")
    return "".join(lines)


def _verdict_text(report: dict[str, Any]) -> str:
    from gpuboot.report._util import host_key
    from gpuboot.ui import host_ranges, printable, table

    rows, passed = [], {}
    order = {"FAIL": 0, "ERROR": 1, "WARN": 2}  # failures first; PASS nodes folded below
    for node in sorted(
        report["nodes"], key=lambda n: (order.get(n["verdict"], 3), host_key(n["host"]))
    ):
        bad = _not_passed(node)
        if not bad and node["verdict"] == "PASS":
            passed.setdefault(_checks_summary(node), []).append(node["host"])
            continue
        first = bad[0] if bad else None
        rows.append(
            (
                node["host"],
                node["verdict"],
                f"{first['rule']} {first['title']}" if first else "",
                first["reason"] if first else _checks_summary(node),
            )
        )
    for summary, hosts in passed.items():  # identical results: one row ("node[1-37]")
        count = f"{len(hosts)} nodes: " if len(hosts) > 1 else ""
        rows.append((host_ranges(hosts), "PASS", "", count + summary))
    text = table(("node", "verdict", "failed check", "reason"), rows)
    for node in report["nodes"]:
        host = printable(node["host"], one_line=True)
        for (status, reason), rules_ in _by_reason(_not_passed(node)[1:]).items():
            what = " ".join(rules_) if len(rules_) > 1 else f"{rules_[0]}"
            text += f"\n  {host}: {status} {what}: {reason}"
    text += _remediate_text(report["nodes"])
    text += _skipped_text(report["nodes"])
    if report.get("bundle"):
        text += f"\nevidence bundle: {report['bundle']}"
    return text


def cmd_certify(args) -> Outcome:
    from gpuboot.report import certificate

    if args.gen_key:
        path = certificate.generate_key(args.gen_key)
        return Outcome(
            EXIT_OK,
            {"private_key": str(path), "public_key": f"{path}.pub"},
            f"signing key: {path} (keep it private); public key: {path}.pub",
        )
    if args.verify:
        return _verify_certificate(args)
    if not args.inventory:
        raise BadInput(
            "certify needs -i INVENTORY (or --verify CERT, or --gen-key PATH)",
            where="gpuboot certify",
            hint="see `gpuboot certify --help`",
        )
    certificate.check_validity_days(args.cert_validity_days)  # before any host is touched
    if args.sign_key:  # a key that cannot sign is found now, not after every node's probes
        certificate.load_private_key(args.sign_key)
    if args.calibrate:
        _check_output_file(args.calibrate, "--calibrate")
    if args.kubeconfig:  # an unusable kubeconfig is bad input: refused before any host
        _check_kubeconfig(args)
    from gpuboot.inventory import load_inventory
    from gpuboot.locks import hold_inventory

    inv = load_inventory(args.inventory)  # read once: the lock, the run and the gate use it
    # The probes need idle GPUs and the gate changes taints: one such run per node.
    with hold_inventory(inv, args.limit, "certify"):
        return _certify_inventory(args, inv)


def _partial_text(paths: list[Any]) -> str:
    """One line per certificate that is partial (the run proved less than the SKU requires):
    verify and the join gate refuse it."""
    from gpuboot.report.certificate import partial

    text = ""
    for path in paths:
        if gap := partial(json.loads(path.read_text())):
            text += f"\n  {path.stem}: PARTIAL certificate ({gap}): does not certify the node"
    return text


def _verify_certificate(args) -> Outcome:
    """certify --verify: is this certificate valid for the node named by --host (and, with
    --bundle, for the hardware a later collection of it shows)?"""
    from gpuboot.report import certificate

    if not args.pubkey:
        raise BadInput("--verify needs --pubkey", hint="pass the signer's KEY.pub")
    if not args.host:
        raise BadInput(
            "--verify needs --host NAME: a certificate is valid for one node only",
            where="--verify",
            hint="name the node the certificate is presented for (its inventory name)",
        )
    result = certificate.verify(
        args.verify,
        args.pubkey,
        host=args.host,
        bundle=args.bundle,
        allow_partial=args.allow_partial,
    )
    cert = result.certificate or {}
    doc = {
        "certificate": args.verify,
        "host": args.host,
        "ok": result.ok,
        "reason": result.reason,
        "scope": cert.get("scope"),
        "probes": cert.get("probes"),
        "expires_at": cert.get("expires_at"),
    }
    text = f"{args.verify}: {'valid' if result.ok else 'INVALID'}: {result.reason}"
    return Outcome(EXIT_OK if result.ok else EXIT_NODE_FAILED, doc, text)


def _check_output_dir(path: str, flag: str) -> None:
    """An existing directory this user can create files in (tried, not guessed: root
    passes every permission check but not a read-only mount)."""
    import tempfile

    if not os.path.isdir(path):
        raise BadInput(
            "is not an existing directory", where=f"{flag} {path}", hint="create it first"
        )
    try:
        with tempfile.TemporaryFile(dir=path, prefix=".gpuboot-write-check-"):
            pass
    except OSError as exc:
        raise BadInput(
            f"cannot write there: {exc.strerror or exc}",
            where=f"{flag} {path}",
            hint="pick a directory this user can write to",
        ) from exc


def _check_output_file(path: str, flag: str) -> None:
    """A file gpuboot may (over)write: in a writable directory, not a directory itself."""
    if os.path.isdir(path):
        raise BadInput("is a directory", where=f"{flag} {path}", hint="name a file")
    _check_output_dir(os.path.dirname(os.path.abspath(path)), flag)


def _check_kubeconfig(args) -> None:
    """The check install makes before touching a host: the kubeconfig loads."""
    from gpuboot.k8s.gate import connect

    connect(args.kubeconfig, args.k8s_context)


def _certify_inventory(args, inv) -> Outcome:
    """certify -i: checks and probes, reports, certificates, the gate."""
    from pathlib import Path

    from gpuboot import certify
    from gpuboot.ids import link_report
    from gpuboot.progress import live_run
    from gpuboot.report import write_reports

    with live_run(sys.stderr, "certify", quiet=args.quiet) as progress:
        report = certify.certify(
            inv,
            limit=args.limit,
            bundle_root=args.bundle_dir,
            progress=progress,
            probes=args.probes,
        )
    link_report(report)  # each failed rule -> the tasks that fix it (JSON, text, HTML)
    written = write_reports(
        report,
        Path(report["run_dir"]) / "reports",
        key_path=Path(args.sign_key) if args.sign_key else None,
        validity_days=args.cert_validity_days,
        allow_warn=args.allow_warn,
    )
    report["reports"] = {name: str(path) for name, path in written.items()}
    code = EXIT_OK if report["passed"] else EXIT_NODE_FAILED
    text = _verdict_text(report) + f"\nreport: {written['html']}"
    certs = [p for name, p in written.items() if name.startswith("certificate:")]
    if certs:
        text += f"\ncertificates: {len(certs)} in {certs[0].parent}"
        text += _partial_text(certs)
    if args.calibrate:
        import yaml

        from gpuboot.calibrate import calibrate

        baseline = calibrate(report, min_nodes=args.calibrate_min_nodes)
        Path(args.calibrate).write_text(
            "# gpuboot certify --calibrate: medians of hardware-healthy nodes\n"
            f"# ({', '.join(baseline['healthy_nodes']) or 'none'}); review, then use as\n"
            "# group_vars for these nodes.\n"
            + yaml.safe_dump({"gpuboot_thresholds": baseline["gpuboot_thresholds"]})
        )
        report["calibration"] = {**baseline, "file": args.calibrate}
        text += (
            f"\ncalibration: {len(baseline['gpuboot_thresholds'])} figure(s) from "
            f"{len(baseline['healthy_nodes'])} node(s) -> {args.calibrate}"
        )
        for figure, why in baseline["skipped"].items():
            text += f"\n  {figure} not calibrated: {why}"
    if args.kubeconfig:
        text, gate_ok = _gate(
            args, inv, report, text, allow_warn=args.allow_warn, allow_partial=args.allow_partial
        )
        code = code if gate_ok else EXIT_NODE_FAILED
    return Outcome(code, report, text)


def _gate(
    args,
    inv,
    report: dict[str, Any],
    text: str,
    *,
    allow_warn: bool = False,
    allow_partial: bool = False,
):
    """Apply the Kubernetes join gate to the report's nodes; (text, every node gated)."""
    from gpuboot.k8s import apply_gate

    actions = apply_gate(
        report,
        kubeconfig=args.kubeconfig,
        context=args.k8s_context,
        node_names=inv.k8s_node_names(),
        dry_run=args.k8s_dry_run,
        allow_warn=allow_warn,
        allow_partial=allow_partial,
    )
    report["k8s_gate"] = [a.to_dict() for a in actions]
    for a in actions:
        missing = "not in the cluster" if a.missing else None
        what = a.error or missing or "; ".join(a.changes) or "no change"
        text += f"\nk8s {a.node}: {what}"
    return text, not any(a.error or a.missing for a in actions)


def cmd_scan(args) -> Outcome:
    from gpuboot.inventory import load_inventory
    from gpuboot.locks import hold_inventory

    if args.textfile_dir:  # written after every node was probed: checked before any
        _check_output_dir(args.textfile_dir, "--textfile-dir")
    if args.kubeconfig:  # an unusable kubeconfig is bad input: refused before any host
        _check_kubeconfig(args)
    inv = load_inventory(args.inventory)  # read once: the lock, the run and the gate use it
    with hold_inventory(inv, args.limit, "scan"):
        return _scan_inventory(args, inv)


def _scan_inventory(args, inv) -> Outcome:
    from pathlib import Path

    from gpuboot import scan
    from gpuboot.ids import link_report
    from gpuboot.progress import live_run
    from gpuboot.report import prometheus, trend, write_reports

    with live_run(sys.stderr, "scan", quiet=args.quiet) as progress:
        report = scan.scan(
            inv,
            limit=args.limit,
            probes=args.probes,
            history=Path(args.history) if args.history else None,
            progress=progress,
            rma_after_reboots=args.rma_after_reboots,
        )
    link_report(report)
    written = write_reports(
        report, Path(report["run_dir"]) / "reports", key_path=None, kind=prometheus.SCAN
    )
    report["reports"] = {name: str(path) for name, path in written.items()}
    # the fleet trend page beside the report: the history up to this scan
    report["reports"]["trend"] = str(
        trend.write(Path(report["history"]), Path(written["html"]).with_name(trend.NAME))
    )
    warning = None
    if args.textfile_dir:  # node_exporter's textfile collector reads every *.prom there
        # merged: under --limit the other nodes' series (and their alerts) stay
        prom, warning = prometheus.write_merged(
            report, Path(args.textfile_dir) / "gpuboot-scan.prom"
        )
        report["reports"]["textfile"] = str(prom)
    code = scan.exit_code(report)  # new drift, not judged, still failing (gpuboot/scan.py)
    text = _verdict_text(report) + (f"\n{warning}" if warning else "")
    text += "".join(f"\n{line}" for line in scan.drift_lines(report))
    text += f"\nhistory: {report['history']}; report: {written['html']}"
    if args.kubeconfig:
        # Only failing nodes go to the gate (taken out of service); a node that passes a
        # scan stays as it is: certify, with its bandwidth probes, lets nodes back in.
        failed = {**report, "nodes": [n for n in report["nodes"] if n["verdict"] in scan.BAD]}
        text, gate_ok = _gate(args, inv, failed, text)
        report["k8s_gate"] = failed["k8s_gate"]
        code = code if gate_ok else EXIT_NODE_FAILED
    return Outcome(code, report, text)


def cmd_report(args) -> Outcome:
    """report trend: the fleet trend page from the scan history (no host)."""
    from pathlib import Path

    from gpuboot import paths, scan
    from gpuboot.report import trend

    history = Path(args.history) if args.history else scan.default_history()
    out = Path(args.output) if args.output else paths.home() / trend.NAME
    if args.output:  # the default's directory is gpuboot's own, made as needed
        _check_output_file(str(out), "--output")
    written = trend.write(history, out, warn=_progress(args))
    return Outcome(EXIT_OK, {"trend": str(written), "history": str(history)}, f"trend: {written}")


def cmd_status(args) -> Outcome:
    """The fleet from the controller's runs and scan history; no host is contacted."""
    from pathlib import Path

    from gpuboot import status
    from gpuboot.ui import table

    hosts = None
    if args.inventory:
        from gpuboot.inventory import load_inventory, select_hosts

        hosts = select_hosts(load_inventory(args.inventory), args.limit)
    doc = status.fleet_status(
        hosts, history=Path(args.history) if args.history else None, warn=_progress(args)
    )
    return Outcome(EXIT_OK, doc, table(status.HEADERS, status.rows(doc)))


def cmd_evaluate(args) -> Outcome:
    from gpuboot import certify
    from gpuboot.ids import link_report

    report = link_report(
        certify.evaluate_bundle(
            args.bundle, profile=args.profile, ignore_manifest=args.ignore_manifest
        )
    )
    code = EXIT_OK if report["passed"] else EXIT_NODE_FAILED
    return Outcome(code, report, _verdict_text(report))


# ---------------------------------------------------------------- parser
class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors through our boundary (exit 2, one line)."""

    argv: ClassVar[list[str]] = []  # what the top parser was given: "did you mean" reads it

    def error(self, message: str):  # type: ignore[override]
        from gpuboot.completion import did_you_mean

        see = f"see `{self.prog} --help`"
        guess = did_you_mean(self, message, _Parser.argv)
        raise BadInput(message, where=self.prog, hint=f"{guess} {see}" if guess else see)

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        from gpuboot.completion import chosen

        _Parser.argv = list(sys.argv[1:] if args is None else args)
        ns, extras = self.parse_known_args(_Parser.argv, namespace)
        if extras:  # told by the verb's parser: its options are the ones to suggest
            chosen(self, ns).error(f"unrecognized arguments: {' '.join(extras)}")
        return ns


def _inventory_arg(value: str) -> str:
    """-i resolved once, here: every verb, the gate and the messages use the absolute path
    (ansible-runner and testinfra run in other directories)."""
    from gpuboot.inventory import inventory_path

    return str(inventory_path(value))


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    common.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")

    p = _Parser(
        prog="gpuboot",
        description="Bootstrap, pin and certify GPU servers.",
        epilog="exit codes: 0 all good, 1 a node failed, 2 bad input, 3 the run broke",
    )
    p.add_argument("--version", action="version", version=f"gpuboot {__version__}")
    verbs = p.add_subparsers(dest="verb", required=True, parser_class=_Parser)

    _add_plugin_verbs(verbs, common)

    run_opts = argparse.ArgumentParser(add_help=False)
    run_opts.add_argument("-i", "--inventory", required=True, type=_inventory_arg)
    run_opts.add_argument("--limit", help="Ansible host pattern")

    inst = verbs.add_parser(
        "install", parents=[common, run_opts], help="install and pin the software stack"
    )
    inst.add_argument("--tags", action="append", help="only tasks with this tag (repeatable)")
    inst.add_argument("--forks", type=int, default=10)
    inst.add_argument(
        "-v", "--verbose", action="store_true", help="stream each task's result per host on stderr"
    )
    inst.add_argument(
        "--strategy",
        default="linear",
        help="linear (Ansible's own, the default) or mitogen (faster controller; "
        "pip install 'gpuboot[fast]')",
    )
    inst.add_argument(
        "--check", action="store_true", help="report what would change; change nothing"
    )
    inst.add_argument("--diff", action="store_true", help="show file and package differences")
    inst.add_argument(
        "--serial", metavar="N|N%", help="roll out in batches of N hosts (or N%% of them)"
    )
    inst.add_argument(
        "--max-fail",
        metavar="N|N%",
        help="stop the rollout once more than N hosts (or N%%) have failed (default: no limit)",
    )
    inst.add_argument(
        "--resume",
        nargs="?",
        const="latest",
        metavar="RUN_ID",
        help="redo only the failed and never-started hosts of an earlier install run"
        " (default: the latest one of this inventory)",
    )
    inst.add_argument(
        "--allow-reboot",
        action="store_true",
        help="reboot nodes whose new stack needs it (once each, never the controller)",
    )
    inst.add_argument(
        "--full",
        action="store_true",
        help="run every role, also on nodes unchanged since their last converge",
    )
    inst.add_argument(
        "--kubeconfig",
        help="cordon and drain cluster members before their stack changes;"
        " `certify --kubeconfig` readmits them once they pass",
    )
    inst.add_argument("--k8s-context", help="kubeconfig context")
    inst.add_argument(
        "--drain-timeout",
        type=float,
        default=600,
        metavar="SECONDS",
        help="give up on a node whose pods are not evicted by then (default: 600)",
    )
    inst.set_defaults(func=cmd_install)

    cert = verbs.add_parser(
        "certify", parents=[common], help="check each node against its profile; collect evidence"
    )
    cert.add_argument("-i", "--inventory", type=_inventory_arg)
    cert.add_argument("--limit", help="Ansible host pattern")
    cert.add_argument(
        "--probes",
        choices=["none", "quick", "full"],
        help="bandwidth probing (default: each host's gpuboot_probes, else quick)",
    )
    cert.add_argument("--bundle-dir", help="where evidence bundles go (default: the run dir)")
    cert.add_argument("--sign-key", help="Ed25519 key: issue a signed certificate per PASS node")
    cert.add_argument(
        "--cert-validity-days",
        type=int,
        default=30,  # certificate.DEFAULT_VALIDITY_DAYS; MAX_VALIDITY_DAYS is checked
        help="days a certificate is valid (default 30, at most 365)",
    )
    cert.add_argument("--allow-warn", action="store_true", help="certify WARN nodes too")
    cert.add_argument(
        "--verify",
        metavar="CERT",
        help="check a certificate (signature, expiry, host, scope) for the node --host names",
    )
    cert.add_argument("--pubkey", help="public key for --verify")
    cert.add_argument("--host", help="with --verify: the node the certificate is presented for")
    cert.add_argument(
        "--bundle",
        metavar="DIR",
        help="with --verify: an evidence bundle collected since; the node's hardware must be "
        "the certified one",
    )
    cert.add_argument(
        "--allow-partial",
        action="store_true",
        help="accept a partial certificate (its run proved less than the SKU requires, e.g. "
        "no pair partner or no probes) in --verify and in the --kubeconfig join gate",
    )
    cert.add_argument("--gen-key", metavar="PATH", help="create a signing key pair and exit")
    cert.add_argument(
        "--calibrate",
        metavar="FILE",
        help="write a gpuboot_thresholds baseline from the healthy nodes",
    )
    cert.add_argument("--calibrate-min-nodes", type=int, default=3)
    cert.add_argument("--kubeconfig", help="apply the join gate: untaint PASS nodes, cordon others")
    cert.add_argument("--k8s-context", help="kubeconfig context")
    cert.add_argument("--k8s-dry-run", action="store_true", help="show the gate's changes only")
    cert.set_defaults(func=cmd_certify)

    sc = verbs.add_parser(
        "scan",
        parents=[common],
        help="scheduled compliance scan: drift since the last scan; failing nodes taken out",
        epilog="exit codes: 0 nothing failing; 1 new drift (a rule newly failing, a first "
        "scan's failures, a new RMA escalation); 4 nothing new, but a node or rule could not "
        "be judged (unreachable, harness ERROR); 5 still failing, nothing new since the last "
        "scan; 2 bad input; 3 the run broke",
    )
    sc.add_argument("-i", "--inventory", required=True, type=_inventory_arg)
    sc.add_argument("--limit", help="Ansible host pattern")
    sc.add_argument(
        "--probes",
        choices=["none", "quick", "full"],
        default="none",
        help="bandwidth probing (default none: a scan must not compete with running jobs)",
    )
    sc.add_argument("--history", help="history file (default: $GPUBOOT_HOME/scan-history.jsonl)")
    sc.add_argument("--textfile-dir", help="also write gpuboot-scan.prom there (node_exporter)")
    sc.add_argument(
        "--rma-after-reboots",
        type=int,
        default=2,  # gpuboot.escalation.DEFAULT_REBOOTS; checked before any host
        metavar="N",
        help="a hardware Xid/SXid/row-remap failure back on the same part after N reboots "
        "(boot ids in the scan history) recommends hardware inspection / RMA (default 2)",
    )
    sc.add_argument("--kubeconfig", help="take failing nodes out: cordon, taint uncertified")
    sc.add_argument("--k8s-context", help="kubeconfig context")
    sc.add_argument("--k8s-dry-run", action="store_true", help="show the gate's changes only")
    sc.set_defaults(func=cmd_scan)

    mx = verbs.add_parser("matrix", parents=[common], help="version stacks and their rules")
    mx.add_argument("action", choices=["list", "show", "check"])
    mx.add_argument("stack", nargs="?", help="stack name or stack file")
    mx.add_argument("--profile", action="append", help="check against this SKU (repeatable)")
    mx.add_argument("--os-family", default="debian", choices=["debian", "redhat"])
    mx.set_defaults(func=cmd_matrix)

    pl = verbs.add_parser(
        "plan", parents=[common, run_opts], help="installed vs pinned, per node (read-only)"
    )
    pl.set_defaults(func=cmd_plan)

    mi = verbs.add_parser(
        "mirror",
        parents=[common],
        help="packages an offline mirror needs (with --repo: their dependency closure)",
        epilog="exit codes: 0 listed (closure complete), 1 a dependency the mirror cannot"
        " satisfy, 2 bad input (stack, --repo unreadable)",
    )
    mi.add_argument("--stack", required=True)
    mi.add_argument("--os-family", default="debian", choices=["debian", "redhat"])
    mi.add_argument(
        "--repo",
        action="append",
        metavar="INDEX",
        help="the mirror's apt Packages index or dnf repodata (file, directory or URL; "
        "repeatable): resolve the dependencies from it (default: the pinned packages only)",
    )
    mi.add_argument(
        "--probe-tools",
        action="append",
        metavar="NAME=VERSION",
        help="the site's probe-tools package (gpuboot_probe_tools_packages), repeatable",
    )
    mi.add_argument("--arch", help="architecture to resolve for (default amd64; x86_64 on redhat)")
    mi.set_defaults(func=cmd_mirror)

    rn = verbs.add_parser(
        "runs",
        parents=[common],
        help="kept run directories: list, prune",
        epilog="exit codes: 0 done, 2 bad input",
    )
    rn_actions = rn.add_subparsers(dest="runs_action", parser_class=_Parser)
    rn_actions.add_parser("list", parents=[common], help="every kept run, oldest first")
    rnp = rn_actions.add_parser(
        "prune",
        parents=[common],
        help="remove old runs (never the newest of a verb, never one in progress)",
    )
    rnp_how = rnp.add_mutually_exclusive_group(required=True)
    rnp_how.add_argument("--keep", type=int, metavar="N", help="keep the N newest runs per verb")
    rnp_how.add_argument("--older-than", metavar="AGE", help="remove runs older than AGE: 14d, 12h")
    rnp.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    rn.set_defaults(func=cmd_runs, runs_action="list")

    hp = verbs.add_parser("help", parents=[common], help="help on gpuboot or one of its commands")
    hp.add_argument("words", nargs="*", metavar="COMMAND", help="e.g. install, or runs prune")
    hp.set_defaults(func=cmd_help, root=p)

    cp = verbs.add_parser(
        "completion", help="shell completion, generated from this parser: source <(...)"
    )
    cp.add_argument("shell", choices=["bash", "zsh"])
    cp.set_defaults(func=cmd_completion, root=p)

    ev = verbs.add_parser(
        "evaluate", parents=[common], help="re-evaluate an evidence bundle offline"
    )
    ev.add_argument("--bundle", required=True)
    ev.add_argument("--profile", help="SKU profile to judge against (default: from meta.json)")
    ev.add_argument(
        "--ignore-manifest",
        action="store_true",
        help="judge the files as they are, even where MANIFEST.json is missing or no longer "
        "matches them (by default such a host is ERROR: evidence changed since the run)",
    )
    ev.set_defaults(func=cmd_evaluate)

    stv = verbs.add_parser(
        "status",
        parents=[common],
        help="per node: last certify, certificate expiry, stack, last scan, drift (no SSH)",
    )
    stv.add_argument("-i", "--inventory", type=_inventory_arg, help="only this inventory's nodes")
    stv.add_argument("--limit", help="Ansible host pattern (with -i)")
    stv.add_argument("--history", help="scan history (default: $GPUBOOT_HOME/scan-history.jsonl)")
    stv.set_defaults(func=cmd_status)

    rep = verbs.add_parser("report", parents=[common], help="fleet pages from the scan history")
    rep.add_argument("page", choices=["trend"], help="trend: failing nodes per rule, bandwidth")
    rep.add_argument("--history", help="scan history (default: $GPUBOOT_HOME/scan-history.jsonl)")
    rep.add_argument("-o", "--output", help="the HTML file (default: $GPUBOOT_HOME/trend.html)")
    rep.set_defaults(func=cmd_report)
    return p


def _os_error(exc: OSError) -> GpubootError:
    from gpuboot.paths import fs_error

    return fs_error(exc, hint="check that path (permissions, free space), then run again")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    want_json = "--json" in argv
    try:
        args = build_parser().parse_args(argv)
        outcome = args.func(args)
    except (GpubootError, OSError) as caught:
        # an OSError here is a controller file gpuboot could not write or read (a full
        # disk, a read-only or missing directory): named with its errno text, no trace
        exc = caught if isinstance(caught, GpubootError) else _os_error(caught)
        _err(f"gpuboot: error: {exc}")
        if want_json:
            _stdout(
                json.dumps(
                    {
                        "error": {
                            "message": exc.message,
                            "where": exc.where,
                            "hint": exc.hint,
                            "exit_code": exc.exit_code,
                        }
                    }
                )
            )
        return exc.exit_code
    except KeyboardInterrupt as exc:  # the verb ended what it started; says how to go on
        _err(f"gpuboot: interrupted{f': {exc}' if str(exc) else ''}")
        return 130
    except Exception as exc:  # the one place that catches everything
        import traceback

        _err(traceback.format_exc())
        _err(f"gpuboot: internal error: {exc!r} -- please report this with the trace above")
        if want_json:
            _stdout(json.dumps({"error": {"message": f"internal error: {exc!r}", "exit_code": 3}}))
        return 3
    if want_json:
        _stdout(json.dumps(outcome.doc, indent=2, default=str))
    elif outcome.text:
        from gpuboot.ui import printable

        _stdout(printable(outcome.text))
    return outcome.code


def _stdout(text: str) -> None:
    """One document or text on stdout; a reader that left (`| head`) had what it wanted:
    no BrokenPipe traceback, on the error path too, and none at interpreter exit."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
