"""Run on an execution node by executor-setup.yml (its system Python, no gpuboot yet):
make gpuboot's venv from the controller's wheelhouse unless it was made from it.

argv: venv, wheelhouse tar, its key, the Python X.Y its wheels are for, pip's wheel, the
wheels (one comma list), the versions its supervisor must report (JSON). Prints "changed"
or "unchanged".
"""

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import venv

venv_dir, tar_path, key, python, pip_wheel, wheels, expected = sys.argv[1:8]
here = f"{sys.version_info[0]}.{sys.version_info[1]}"
if here != python:
    sys.exit(f"this executor's python3 is {here}; the controller's wheels are for {python}")
marker = os.path.join(venv_dir, "gpuboot-wheelhouse")
try:
    with open(marker) as f:
        made_from = f.read().strip()
except OSError:
    made_from = None


def runs_expected() -> bool:
    """The venv's supervisor reports the versions the controller runs."""
    worker = os.path.join(venv_dir, "bin", "gpuboot-executor-worker")
    try:
        done = subprocess.run([worker, "versions"], capture_output=True, text=True, check=False)
        said = json.loads(done.stdout) if done.returncode == 0 else {}
    except (OSError, ValueError):
        return False
    return isinstance(said, dict) and all(said.get(p) == v for p, v in json.loads(expected).items())


# Made from this wheelhouse and still running its versions (not altered since): nothing to do.
if made_from == key and runs_expected():
    print("unchanged")
    sys.exit(0)

shutil.rmtree(venv_dir, ignore_errors=True)
# Without pip: Debian's python3 has no ensurepip; pip runs from its own wheel below.
venv.EnvBuilder(with_pip=False).create(venv_dir)
with tempfile.TemporaryDirectory() as tmp, tarfile.open(tar_path) as tar:
    for member in tar.getmembers():  # flat regular files only, as the controller packs them
        if not member.isfile() or "/" in member.name or member.name.startswith("."):
            sys.exit(f"{tar_path}: unexpected member {member.name!r}")
        with tar.extractfile(member) as src, open(os.path.join(tmp, member.name), "wb") as dst:
            shutil.copyfileobj(src, dst)
    done = subprocess.run(
        [
            os.path.join(venv_dir, "bin", "python"),
            os.path.join(tmp, pip_wheel, "pip"),
            "install",
            "--quiet",
            "--no-index",
            "--no-deps",
            "--no-cache-dir",
            "--disable-pip-version-check",
            *(os.path.join(tmp, w) for w in wheels.split(",")),
        ],
        check=False,
    )
    if done.returncode != 0:
        sys.exit(f"pip could not install the wheelhouse into {venv_dir} (exit {done.returncode})")
with open(marker, "w") as f:
    f.write(key + "\n")
print("changed")
