"""Run molecule against a lab, and read the testinfra verifier's summary out of its output."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).parents[2]


def molecule(
    *args: str, inventory: Path, state: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``molecule ARGS`` on the lab whose inventory is given. ``state`` is the run's own
    ephemeral directory: molecule's default is keyed by project and scenario name only,
    so a later run would inherit an earlier one's state (prepare marked done, the inventory
    link of a lab long gone)."""
    venv_bin = str(Path(sys.executable).parent)
    full_env = {
        **os.environ,
        **(env or {}),
        "PATH": f"{venv_bin}:{os.environ['PATH']}",
        "GPUBOOT_MOLECULE_INVENTORY": str(inventory),
        "MOLECULE_EPHEMERAL_DIRECTORY": str(state),
        "PY_COLORS": "0",
        "ANSIBLE_FORCE_COLOR": "0",
    }
    return subprocess.run(
        [f"{venv_bin}/molecule", *args],
        cwd=PROJECT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=1800,
    )


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
