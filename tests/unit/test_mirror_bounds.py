"""`gpuboot mirror --repo` reads a repository's metadata within bounds: a compressed index
is expanded chunk by chunk and refused once past the cap (never expanded whole first), a
path that is a FIFO or a device is refused, and a field continued over many lines is read
in linear time."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import time
import tracemalloc

import pytest

from gpuboot import mirror
from gpuboot.errors import BadInput

CAP = 1024 * 1024


def _bomb(kind: str, mib: int = 64) -> bytes:
    """``mib`` MiB of zeros, compressed: a few KB that expand far past CAP."""
    make = {
        "xz": lambda: lzma.LZMACompressor(preset=0),
        "gz": lambda: _GzipCompressor(),
        "bz2": lambda: bz2.BZ2Compressor(1),
    }[kind]()
    chunk = bytes(1 << 20)
    return b"".join(make.compress(chunk) for _ in range(mib)) + make.flush()


class _GzipCompressor:
    """gzip's one-member format, fed in chunks (gzip.compress wants the whole input)."""

    def __init__(self) -> None:
        import zlib

        self._z = zlib.compressobj(9, wbits=31)

    def compress(self, data: bytes) -> bytes:
        return self._z.compress(data)

    def flush(self) -> bytes:
        return self._z.flush()


@pytest.mark.parametrize("kind", ["xz", "gz", "bz2"])
def test_a_compressed_index_is_refused_before_it_expands_past_the_cap(tmp_path, monkeypatch, kind):
    monkeypatch.setattr(mirror, "MAX_INDEX_BYTES", CAP)
    path = tmp_path / f"Packages.{kind}"
    path.write_bytes(_bomb(kind))
    assert path.stat().st_size < 200 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(BadInput) as caught:
            mirror.read_entries(str(path))
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * CAP, peak  # the cap and a chunk, never the 64 MiB it expands to
    assert f"expands past {CAP} bytes" in caught.value.message


def test_a_compressed_index_within_the_cap_reads_whole(tmp_path):
    text = "Package: a\nVersion: 1\nDepends: b\n\nPackage: b\nVersion: 2\n"
    for name, data in (
        ("Packages.gz", gzip.compress(text.encode())),
        ("Packages.xz", lzma.compress(text.encode())),
        ("Packages.bz2", bz2.compress(text.encode())),
    ):
        path = tmp_path / name
        path.write_bytes(data)
        assert [e.pin() for e in mirror.read_entries(str(path))] == ["a=1", "b=2"]


@pytest.mark.parametrize("kind", ["FIFO", "device"])
def test_an_index_path_that_is_a_fifo_or_a_device_is_refused(tmp_path, kind):
    if kind == "FIFO":
        path = tmp_path / "Packages"
        os.mkfifo(path)
    else:
        path = "/dev/zero"
    with pytest.raises(BadInput) as caught:
        mirror.read_entries(str(path))
    assert "not a regular file" in caught.value.message


def test_a_field_continued_over_300000_lines_parses_in_linear_time():
    lines = "".join(f" , dep-{i:012d}-padding\n" for i in range(300_000))
    text = "Package: big\nVersion: 1\nDepends: libc6\n" + lines + "\nPackage: x\nVersion: 2\n"
    started = time.perf_counter()
    entries = mirror.parse_packages(text, "fixture")
    elapsed = time.perf_counter() - started
    assert len(entries[0].depends) == 300_001 and entries[1].pin() == "x=2"
    # linear: well under a second here; copying the field on every line took ~30 s
    assert elapsed < 8, elapsed


def test_repodata_naming_a_primary_outside_the_repository_is_refused(tmp_path):
    (tmp_path / "repodata").mkdir()
    (tmp_path / "repodata" / "repomd.xml").write_text(
        '<repomd xmlns="http://linux.duke.edu/metadata/repo"><data type="primary">'
        '<location href="../../../etc/passwd"/></data></repomd>'
    )
    with pytest.raises(BadInput) as caught:
        mirror.read_entries(str(tmp_path))
    assert "outside the repository" in caught.value.message
