"""Read the testinfra verifier's pytest summary out of molecule's output."""

from __future__ import annotations

import re

# pytest's last line, e.g. "===== 1 failed, 45 passed in 12.31s =====". Ansible's recap
# ("failed=0") never looks like this, so a count of failures cannot hide behind it.
_SUMMARY = re.compile(r"^=+ (.+?) in [\d.]+s(?: \([\d:]+\))? =+$", re.MULTILINE)


def verifier_summary(out: str) -> dict[str, int]:
    """Outcome -> count from the last pytest summary line in ``out``; {} if there is none."""
    found = _SUMMARY.findall(out)
    if not found:
        return {}
    counts = {}
    for part in found[-1].split(", "):
        n, _, outcome = part.partition(" ")
        if n.isdigit():
            counts[outcome.rstrip("s") if outcome == "errors" else outcome] = int(n)
    return counts
