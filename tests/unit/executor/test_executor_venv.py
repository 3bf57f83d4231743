"""executor-setup.yml's program (files/executor_venv.py), run as the executor runs it: a
venv made offline from a wheelhouse, pip bootstrapped from its own wheel; made again only
when it was made from another wheelhouse or its supervisor no longer reports the
controller's versions; refused on a Python the wheels are not for."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from gpuboot import paths
from gpuboot.executor import wheelhouse

pytestmark = pytest.mark.subprocess

PROGRAM = paths.PLAYBOOKS_DIR / "files" / "executor_venv.py"
VERSIONS = {"ansible-core": "2.19.0", "ansible-runner": "2.4.3", "gpuboot": "0.1.0"}
HERE = f"{sys.version_info[0]}.{sys.version_info[1]}"


def _worker_wheel(out: Path) -> Path:
    """A stand-in supervisor: `gpuboot-executor-worker versions` prints its versions.json."""
    info = "fakeworker-1.0.dist-info"
    files = {
        "fakeworker/__init__.py": (
            "import pathlib, sys\n"
            "def main():\n"
            "    sys.stdout.write((pathlib.Path(__file__).parent / 'versions.json').read_text())\n"
        ),
        "fakeworker/versions.json": json.dumps(VERSIONS),
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: fakeworker\nVersion: 1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": (
            "[console_scripts]\ngpuboot-executor-worker = fakeworker:main\n"
        ),
    }
    whl = out / "fakeworker-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
        z.writestr(f"{info}/RECORD", "".join(f"{n},,\n" for n in [*files, f"{info}/RECORD"]))
    return whl


@pytest.fixture(scope="module")
def house(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("house")
    pip = wheelhouse.repack(metadata.distribution("pip"), out)
    worker = _worker_wheel(out)
    tar = out / "wheelhouse.tar"
    with tarfile.open(tar, "w") as t:
        for whl in (pip, worker):
            t.add(whl, arcname=whl.name)
    return {"tar": tar, "pip": pip.name, "wheels": f"{pip.name},{worker.name}"}


def _make(venv: Path, house: dict, key: str = "k1", python: str = HERE):
    return subprocess.run(
        [
            sys.executable,
            "-c",
            PROGRAM.read_text(),
            str(venv),
            str(house["tar"]),
            key,
            python,
            house["pip"],
            house["wheels"],
            json.dumps(VERSIONS),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_venv_is_made_once_then_kept_while_it_runs_the_controllers_versions(
    tmp_path: Path, house: dict
) -> None:
    venv = tmp_path / "venv"
    first = _make(venv, house)
    assert (first.returncode, first.stdout.strip()) == (0, "changed"), first.stderr
    said = subprocess.run(
        [venv / "bin" / "gpuboot-executor-worker", "versions"], capture_output=True
    )
    assert json.loads(said.stdout) == VERSIONS
    again = _make(venv, house)
    assert (again.returncode, again.stdout.strip()) == (0, "unchanged"), again.stderr

    # altered since (another gpuboot installed by hand): made again
    (installed,) = venv.glob("lib/python*/site-packages/fakeworker/versions.json")
    installed.write_text(json.dumps({**VERSIONS, "gpuboot": "0.0.9"}))
    healed = _make(venv, house)
    assert (healed.returncode, healed.stdout.strip()) == (0, "changed"), healed.stderr
    assert json.loads(installed.read_text()) == VERSIONS

    # another wheelhouse: made again
    other = _make(venv, house, key="k2")
    assert (other.returncode, other.stdout.strip()) == (0, "changed"), other.stderr


def test_a_python_the_wheels_are_not_for_is_refused_naming_both(
    tmp_path: Path, house: dict
) -> None:
    done = _make(tmp_path / "venv", house, python="3.99")
    assert done.returncode == 1
    assert f"python3 is {HERE}; the controller's wheels are for 3.99" in done.stderr
    assert not (tmp_path / "venv").exists()
