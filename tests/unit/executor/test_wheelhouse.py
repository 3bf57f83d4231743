"""The executors' wheelhouse: the controller's installed distributions and what they
require, zipped back into wheels byte for byte, cached by a key over names, versions and
source digests."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from gpuboot.executor import wheelhouse


def test_requirements_follow_what_each_needs_here_and_leave_extras_out() -> None:
    found = wheelhouse.requirements(("gpuboot",))
    # gpuboot's own, and ansible-core's through it
    assert {"gpuboot", "ansible-core", "ansible-runner", "jinja2", "markupsafe"} <= set(found)
    assert {"resolvelib", "pexpect", "cryptography"} <= set(found)
    # extras nobody asked for (gpuboot[dev], gpuboot[k8s], gpuboot[fast])
    assert not {"molecule", "ruff", "kubernetes", "mitogen", "gpuboot-lab"} & set(found)


def test_the_file_name_tags_join_each_part_of_the_wheels_tags() -> None:
    meta = (
        "Wheel-Version: 1.0\nTag: cp311-cp311-manylinux_2_17_x86_64\n"
        "Tag: cp311-cp311-manylinux2014_x86_64\n"
    )
    assert wheelhouse._tags(meta) == "cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64"
    assert wheelhouse._tags("Tag: py2-none-any\nTag: py3-none-any\n") == "py2.py3-none-any"


def test_a_repacked_wheel_holds_the_installed_bytes_and_a_record_that_vouches_for_them(
    tmp_path: Path,
) -> None:
    dist = metadata.distribution("pexpect")
    whl = wheelhouse.repack(dist, tmp_path)
    assert whl.name == f"pexpect-{dist.version}-py2.py3-none-any.whl"
    with zipfile.ZipFile(whl) as z:
        names = z.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        assert not [n for n in names if n.split("/")[-1] in ("INSTALLER", "direct_url.json")]
        record = list(csv.reader(io.StringIO(z.read(f"{info}/RECORD").decode())))
        assert {row[0] for row in record} == set(names)
        for name, digest, size in record:
            if name.endswith("/RECORD"):
                continue
            data = z.read(name)
            installed = Path(dist.locate_file(name)).read_bytes()
            assert data == installed, name
            sha = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, int(size)) == (f"sha256={sha}", len(data)), name
    (tmp_path / "again").mkdir()
    again = wheelhouse.repack(dist, tmp_path / "again")
    assert again.read_bytes() == whl.read_bytes()  # the same installed bytes, the same wheel


def test_the_cache_key_changes_with_a_version_or_a_source_tree() -> None:
    class Dist:
        def __init__(self, version: str):
            self.version = version

    base = {"a": Dist("1.0"), "b": Dist("2.0")}
    key = wheelhouse.cache_key(base, {"b": "tree-1"})
    assert key == wheelhouse.cache_key(dict(reversed(base.items())), {"b": "tree-1"})
    assert key != wheelhouse.cache_key({**base, "a": Dist("1.1")}, {"b": "tree-1"})
    assert key != wheelhouse.cache_key(base, {"b": "tree-2"})


def test_a_wheelhouse_is_built_once_per_key_and_the_newest_few_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wheelhouses_built
) -> None:
    first = wheelhouse.ensure()
    assert wheelhouse.ensure() == first and [k for k, _ in wheelhouses_built] == [first.key]
    home = tmp_path / "executor-wheelhouse"
    for old in ("old1", "old2", "old3"):
        (home / old).mkdir()
    monkeypatch.setattr(wheelhouse, "cache_key", lambda dists, sources: "newest")
    assert wheelhouse.ensure().key == "newest"
    assert len([p for p in home.iterdir() if p.is_dir()]) == wheelhouse.KEEP
    assert (home / "newest").is_dir()


def test_the_wheelhouse_packs_mitogen_when_the_controller_has_it(wheelhouses_built) -> None:
    pytest.importorskip("ansible_mitogen")
    wheelhouse.ensure()
    ((_key, packed),) = wheelhouses_built
    assert "mitogen" in packed and "gpuboot" in packed
