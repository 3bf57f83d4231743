"""The stream reader: units, offsets, and a stream that stops short is never a whole one."""

from __future__ import annotations

import os
import time

import pytest

from gpuboot.executor.wire import Cut, Silence, WireReader
from tests.unit.executor.conftest import stream


def _reader(data: bytes, close: bool = True, **kw) -> tuple[WireReader, int]:
    r, w = os.pipe()
    os.write(w, data)
    if close:
        os.close(w)
    return WireReader(r, heartbeat_s=kw.get("heartbeat_s", 5), first_byte_s=1), w


def test_units_of_a_whole_stream_and_the_offset_is_its_length():
    data = stream()
    reader, _ = _reader(data)
    kinds = [u.kind for u in reader.units()]
    assert kinds == [
        "status", "status", "event", "event", "keepalive", "event", "status", "artifacts", "eof"
    ]  # fmt: skip
    assert reader.offset == len(data)


def test_a_stream_ending_inside_a_line_is_cut_and_the_offset_stops_at_the_last_whole_unit():
    data = stream()
    first = data.index(b"\n") + 1
    reader, _ = _reader(data[: first + 10])
    units = reader.units()
    assert next(units).kind == "status"
    with pytest.raises(Cut, match="inside a line"):
        next(units)
    assert reader.offset == first


def test_a_stream_ending_inside_the_artifacts_is_cut():
    data = stream()
    end = data.index(b'{"eof"')
    reader, _ = _reader(data[: end - 5])
    with pytest.raises(Cut, match="inside the artifacts"):
        list(reader.units())


def test_not_the_protocol_is_cut():
    reader, _ = _reader(b"Traceback (most recent call last):\n")
    with pytest.raises(Cut, match="not a line of the protocol"):
        list(reader.units())


def test_silence_past_the_heartbeat_raises_instead_of_waiting_for_ever():
    data = stream()
    reader, w = _reader(data[: data.index(b"\n") + 1], close=False, heartbeat_s=0.3)
    units = reader.units()
    assert next(units).kind == "status"
    started = time.monotonic()
    with pytest.raises(Silence):
        next(units)
    assert time.monotonic() - started < 2
    os.close(w)


def test_a_reader_started_at_an_offset_counts_from_it():
    data = stream()
    first = data.index(b"\n") + 1
    reader, _ = _reader(data[first:])
    reader.offset = first
    list(reader.units())
    assert reader.offset == len(data)
