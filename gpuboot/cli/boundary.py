"""The one error boundary: gpuboot's own errors become a clean message with its hint (and
an error document under --json), anything else "internal error, please report"; then
the verb's Outcome is printed. Library code never prints or exits."""

from __future__ import annotations

import json
import os
import sys

from gpuboot.errors import GpubootError


def _os_error(exc: OSError) -> GpubootError:
    from gpuboot.paths import fs_error

    return fs_error(exc, hint="check that path (permissions, free space), then run again")


def main(argv: list[str] | None = None) -> int:
    from gpuboot.cli.outcome import err
    from gpuboot.cli.parser import build_parser
    from gpuboot.executor.mux import shared_connections

    argv = sys.argv[1:] if argv is None else argv
    want_json = "--json" in argv
    try:
        args = build_parser().parse_args(argv)
        with shared_connections():  # one ssh master per executor the verb reaches
            outcome = args.func(args)
    except (GpubootError, OSError) as caught:
        # an OSError here is a controller file gpuboot could not write or read (a full
        # disk, a read-only or missing directory): named with its errno text, no trace
        exc = caught if isinstance(caught, GpubootError) else _os_error(caught)
        err(f"gpuboot: error: {exc}")
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
        err(f"gpuboot: interrupted{f': {exc}' if str(exc) else ''}")
        return 130
    except Exception as exc:  # the one place that catches everything
        import traceback

        err(traceback.format_exc())
        err(f"gpuboot: internal error: {exc!r} -- please report this with the trace above")
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
