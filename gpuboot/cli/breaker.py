"""`gpuboot breaker status|reset`: the breakers a scan opened when many nodes failed one rule
for one reason (gpuboot.breaker)."""

from __future__ import annotations

from gpuboot.cli import options
from gpuboot.cli.outcome import Outcome

EPILOG = (
    "exit codes: 0 no breaker open (status), done (reset); 6 a breaker is open (status); "
    "2 bad input (an unknown rule, an unreadable state file: its fix is named)"
)


def register(verbs, common) -> None:
    bk = verbs.add_parser(
        "breaker",
        parents=[common],
        help="breakers opened by a rule failing on many nodes at once: status, reset",
        epilog=EPILOG,
    )
    actions = bk.add_subparsers(dest="breaker_action", parser_class=type(bk))
    actions.add_parser(
        "status",
        parents=[common, options.history()],
        help="the open breakers: rule, shared reason, nodes, since when (the default)",
        epilog=EPILOG,
    )
    reset = actions.add_parser(
        "reset",
        parents=[common, options.history()],
        help="close breakers once their cause is fixed: the next scan judges afresh "
        "(nothing held back is replayed)",
        epilog=EPILOG,
    )
    reset.add_argument("--rule", metavar="ID", help="close this rule's breaker (default: all)")
    reset.add_argument("--reason", metavar="TEXT", help="why: kept in the breaker's record")
    # --history on the actions only: a subparser's default would override the verb's value
    bk.set_defaults(func=run, breaker_action="status", history=None)


def run(args) -> Outcome:
    from pathlib import Path

    from gpuboot.breaker import BreakerState, state_for

    # the breakers of the fleet that scan history records (the scan keeps them beside it)
    state = BreakerState(state_for(Path(args.history) if args.history else None))
    if args.breaker_action == "reset":
        return _reset(state, args.rule, args.reason)
    return _status(state)


def _status(state) -> Outcome:
    from gpuboot.breaker import EXIT_BREAKER_OPEN
    from gpuboot.errors import EXIT_OK

    trips = sorted(state.open_rules().values(), key=lambda t: t.rule)
    doc = {"state": str(state.path), "open": [t.to_dict(state.path) for t in trips]}
    if not trips:
        return Outcome(EXIT_OK, doc, "no breaker open: scans take failing nodes out as usual")
    lines = []
    for t in trips:
        since = f"(open since {t.opened_at}, run {t.run_id or 'unknown'})"
        lines.append(f"{t.alert(state.path)} {since}")
        lines.append(f"  nodes: {', '.join(t.nodes)}")
    return Outcome(EXIT_BREAKER_OPEN, doc, "\n".join(lines))


def _reset(state, rule: str | None, reason: str | None) -> Outcome:
    from gpuboot.errors import EXIT_OK

    aside = None if rule else state.set_aside_unreadable()
    open_now = state.open_rules()
    if rule and rule not in open_now:
        _check_rule(rule, open_now, state.path)
    closed = state.reset(rule, reason=reason)
    doc = {
        "state": str(state.path),
        "closed": closed,
        "open": sorted(state.open_rules()),
        "unreadable_set_aside": str(aside) if aside else None,
    }
    lines = []
    if aside:
        lines.append(f"unreadable breaker state set aside as {aside}: every breaker is closed")
    if closed:
        lines.append(
            f"closed: {', '.join(closed)}; the next scan judges afresh (nothing held back is "
            "replayed: a cause still shared by many nodes opens the breaker again)"
        )
    elif not aside:
        lines.append(f"no breaker open{f' for {rule}' if rule else ''}: nothing to reset")
    if doc["open"]:
        lines.append(f"still open: {', '.join(doc['open'])}")
    return Outcome(EXIT_OK, doc, "\n".join(lines))


def _check_rule(rule: str, open_now, path) -> None:
    """A rule that is neither open nor one of gpuboot's is a typo: refused, not "done"."""
    from gpuboot.breaker import reset_command
    from gpuboot.completion import close
    from gpuboot.errors import BadInput
    from gpuboot.ids import rule_ids

    known = rule_ids()
    if rule in known:
        return
    guess = close(rule, [*open_now, *known])
    opened = f"open: {', '.join(sorted(open_now))}" if open_now else "no breaker is open"
    raise BadInput(
        f"{rule!r} is not a rule id of gpuboot ({opened})",
        where="--rule",
        hint=reset_command(path, guess[0])
        if guess
        else f"{reset_command(path, action='status')} lists the open breakers",
    )
