"""The controller and an executor set up from its wheelhouse compute the same source
digest from the same tree: the wheel carries exactly the files the digest reads."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

import gpuboot
from gpuboot.executor import wheelhouse
from gpuboot.executor.versions import shipped, source_digest

pytestmark = pytest.mark.subprocess


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


def test_the_installed_wheel_gives_the_controllers_digest(built):
    here, unpacked = built
    assert source_digest(unpacked) == here


def test_the_digest_reads_every_file_of_the_package_the_wheel_carries(built):
    _, unpacked = built
    carried = [p.relative_to(unpacked) for p in unpacked.rglob("*") if p.is_file()]
    assert carried and [str(p) for p in carried if not shipped(p)] == []
