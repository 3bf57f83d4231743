"""The controller and an executor set up from its wheelhouse compute the same source
digest from the same tree: the wheel carries exactly the files the digest reads, and other
code at the same version makes another wheelhouse."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

import gpuboot
from gpuboot.executor import wheelhouse
from gpuboot.executor.versions import shipped, source_digest


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[str, Path]:
    """The controller's digest, then gpuboot's wheel built as ``wheelhouse.ensure`` builds it
    from the same tree, unpacked as pip installs it."""
    # Taken just before the copy: an edit to the tree while the wheel builds cannot fail it.
    here = source_digest(Path(gpuboot.__file__).parent)
    tmp = tmp_path_factory.mktemp("wheel")
    (out := tmp / "wheels").mkdir()
    dist = wheelhouse.requirements(("gpuboot",))["gpuboot"]
    root = wheelhouse._source_dir(dist)
    if root is None:  # installed from a wheel: the wheelhouse repacks it
        wheel = wheelhouse.repack(dist, out)
    else:
        files = wheelhouse._tree_files(root, (dist.read_text("top_level.txt") or "gpuboot").split())
        wheel = wheelhouse.build_from_source(root, files, out, tmp)
    with zipfile.ZipFile(wheel) as whl:
        whl.extractall(tmp / "site-packages")
    return here, tmp / "site-packages" / "gpuboot"


@pytest.mark.subprocess  # pip builds the wheel
def test_the_installed_wheel_gives_the_controllers_digest(built):
    here, unpacked = built
    assert source_digest(unpacked) == here


@pytest.mark.subprocess
def test_the_digest_reads_every_file_of_the_package_the_wheel_carries(built):
    _, unpacked = built
    carried = [p.relative_to(unpacked) for p in unpacked.rglob("*") if p.is_file()]
    assert carried and [str(p) for p in carried if not shipped(p)] == []


class _Installed:
    """An installed (not editable) distribution: its version and its RECORD."""

    def __init__(self, version: str, record: str):
        self.version, self.record = version, record

    def read_text(self, name: str) -> str | None:
        return self.record if name == "RECORD" else None


def test_a_controller_reinstalled_from_other_code_at_the_same_version_gets_a_new_wheelhouse(
    monkeypatch, wheelhouses_built
):
    """Else the cached wheelhouse of the earlier code would go to the executors, and their
    digest would never match the controller's again."""
    for record in ("gpuboot/cli.py,sha256=AAA,10", "gpuboot/cli.py,sha256=BBB,10"):
        dists = {"gpuboot": _Installed("0.1.0", record), "pip": _Installed("24.0", "")}
        monkeypatch.setattr(wheelhouse, "requirements", lambda _roots, d=dists: d)
        wheelhouse.ensure()
    assert len({key for key, _ in wheelhouses_built}) == 2
