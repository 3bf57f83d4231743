"""`gpuboot evaluate --bundle DIR`: an evidence bundle judged again, offline."""

from __future__ import annotations

from gpuboot.cli.outcome import Outcome
from gpuboot.errors import EXIT_NODE_FAILED, EXIT_OK


def register(verbs, common) -> None:
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
    ev.add_argument(
        "--pubkey",
        help="the certify key's public half (KEY.pub): MANIFEST.json must be sealed with it "
        "and bind each host's directory to the hardware it shows; else every host is ERROR",
    )
    ev.set_defaults(func=run)


def run(args) -> Outcome:
    from gpuboot import certify
    from gpuboot.cli import render
    from gpuboot.ids import link_report

    report = link_report(
        certify.evaluate_bundle(
            args.bundle,
            profile=args.profile,
            ignore_manifest=args.ignore_manifest,
            pubkey=args.pubkey,
        )
    )
    code = EXIT_OK if report.passed else EXIT_NODE_FAILED
    return Outcome(code, report.to_dict(), render.verdict_text(report))
