"""Run one of the gpuboot.node collection's modules as Ansible runs it on a node: its own
code in a fresh interpreter, the arguments in a JSON file, the tools it calls from a PATH
the test chose. The module's JSON answer is returned (a failure is one too: failed, msg)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gpuboot import paths

PACKAGE = "ansible_collections.gpuboot.node.plugins.modules"


def run_module(
    module: str,
    root: Path,
    args: dict,
    *,
    check: bool = False,
    env: dict | None = None,
    timeout: int = 60,
) -> dict:
    """``module`` with ``args`` (check mode, --diff on), ``root/bin`` first on PATH."""
    params = {**args, "_ansible_check_mode": check, "_ansible_diff": True}
    (root / "args.json").write_text(json.dumps({"ANSIBLE_MODULE_ARGS": params}))
    proc = subprocess.run(
        [sys.executable, "-m", f"{PACKAGE}.{module}", str(root / "args.json")],
        capture_output=True,
        text=True,
        cwd=root,
        env={
            # a module's own PATH search adds /sbin, /usr/sbin and /usr/local/sbin
            "PATH": f"{root / 'bin'}:/usr/bin:/bin",
            "PYTHONPATH": str(paths.COLLECTIONS_DIR),
            "HOME": str(root),
            **(env or {}),
        },
        timeout=timeout,
    )
    assert proc.stdout, proc.stderr
    return json.loads(proc.stdout)
