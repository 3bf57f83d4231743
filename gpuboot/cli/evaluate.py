"""`gpuboot evaluate --bundle DIR`: an evidence bundle judged again, offline."""

from __future__ import annotations

from pathlib import Path

from gpuboot.cli.outcome import Outcome, progress
from gpuboot.errors import EXIT_NODE_FAILED, EXIT_OK, BadInput

# Files a run directory (runs/<id>/) holds beside its bundle/ and reports/; a bundle's
# top level holds MANIFEST.json and one directory per host, never these.
RUN_DIR_MARKERS = ("report.json", "results.json", "rollout.json")


def register(verbs, common) -> None:
    ev = verbs.add_parser(
        "evaluate", parents=[common], help="re-evaluate an evidence bundle offline"
    )
    ev.add_argument(
        "--bundle",
        required=True,
        metavar="DIR",
        help="the evidence bundle, or the run directory holding it (runs/<id>/: its bundle/)",
    )
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
            str(bundle_dir(Path(args.bundle), progress(args))),
            profile=args.profile,
            ignore_manifest=args.ignore_manifest,
            pubkey=args.pubkey,
        )
    )
    code = EXIT_OK if report.passed else EXIT_NODE_FAILED
    return Outcome(code, report.to_dict(), render.verdict_text(report, args))


def bundle_dir(given: Path, note) -> Path:
    """The bundle to judge: ``given`` itself, or the ``bundle/`` of the run directory it
    names (a run's reports/ and report.json are no hosts to judge)."""
    if (given / "MANIFEST.json").exists() or not any(
        (given / m).is_file() for m in RUN_DIR_MARKERS
    ):
        return given  # a bundle (or nothing: evaluate names what is wrong with it)
    inner = given / "bundle"
    if inner.is_dir() and not inner.is_symlink():
        note(f"{given} is a run directory: judging its evidence bundle {inner}")
        return inner
    raise BadInput(
        "is a run directory without an evidence bundle (bundle/): a run kept its bundle "
        "elsewhere (certify --bundle-dir), or it was not a certify or scan run",
        where=str(given),
        hint='pass the bundle directory itself (the run\'s report.json names it: "bundle")',
    )
