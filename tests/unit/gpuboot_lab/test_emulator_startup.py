"""A shim stands in for a native binary: its start-up is what certify pays per probe on a
lab node (the nodes share the controller's cores), so it imports only what it uses and a
node keeps the compiled emulator instead of compiling it on every call."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.unit.gpuboot_lab._emu import GPUEMU

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

EMULATOR = GPUEMU.parent


def _run(code: str, env: dict[str, str]) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_shim_modules_leave_unused_heavy_imports_out():
    code = (
        f"import sys; sys.path.insert(0, {str(EMULATOR)!r})\n"
        "import emu.main, emu.state, emu.kernel, emu.nic\n"
        "print(' '.join(m for m in ('tempfile', 'hashlib') if m in sys.modules))"
    )
    assert _run(code, dict(os.environ)) == ""


def test_node_shim_keeps_compiled_modules_in_a_node_local_cache():
    # PYTHONDONTWRITEBYTECODE: the test reads the setting, writes nothing to this machine
    env = {k: v for k, v in os.environ.items() if k != "GPUEMU_ROOT"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    code = (
        "import runpy, sys\n"
        f"sys.argv = [{str(GPUEMU)!r}]\n"
        f"runpy.run_path({str(GPUEMU)!r}, run_name='gpuemu')\n"
        "print(sys.pycache_prefix)"
    )
    assert _run(code, env) == "/var/cache/gpuemu/pycache"


def test_test_roots_write_no_cache(tmp_path):
    env = {**os.environ, "GPUEMU_ROOT": str(tmp_path)}
    code = (
        "import runpy, sys\n"
        f"sys.argv = [{str(GPUEMU)!r}]\n"
        f"runpy.run_path({str(GPUEMU)!r}, run_name='gpuemu')\n"
        "print(sys.pycache_prefix, sys.dont_write_bytecode)"
    )
    assert _run(code, env) == "None True"
