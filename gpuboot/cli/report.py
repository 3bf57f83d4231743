"""`gpuboot report trend`: fleet pages from the scan history (no host)."""

from __future__ import annotations

from gpuboot.cli import options
from gpuboot.cli.outcome import Outcome, progress
from gpuboot.errors import EXIT_OK


def register(verbs, common) -> None:
    rep = verbs.add_parser(
        "report", parents=[common, options.history()], help="fleet pages from the scan history"
    )
    rep.add_argument(
        "page",
        choices=["trend"],
        help="trend: failing nodes per rule (at fleet size a map of nodes by scan instead), "
        "bandwidth, and a timeline page per node it names",
    )
    rep.add_argument("-o", "--output", help="the HTML file (default: $GPUBOOT_HOME/trend.html)")
    rep.set_defaults(func=run)


def run(args) -> Outcome:
    from pathlib import Path

    from gpuboot import paths, scan, timeline
    from gpuboot.cli import preflight
    from gpuboot.report import trend

    history = Path(args.history) if args.history else scan.default_history()
    out = Path(args.output) if args.output else paths.home() / trend.NAME
    if args.output:  # the default's directory is gpuboot's own, made as needed
        preflight.check_output_file(str(out), "--output")
    records = scan.history_records(history, warn=progress(args))
    written = trend.write(
        records,
        out,
        source=str(history),
        # the history's bad lines were told above: its second read for the pages is quiet
        timelines=lambda hosts: timeline.timelines(hosts, history=history),
    )
    return Outcome(EXIT_OK, {"trend": str(written), "history": str(history)}, f"trend: {written}")
