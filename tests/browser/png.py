"""Minimal PNG reader (8-bit RGB/RGBA, non-interlaced: what Chromium writes), no PIL."""

from __future__ import annotations

import operator
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {2: 3, 6: 4, 0: 1, 4: 2}  # colour type -> samples per pixel


@dataclass(frozen=True)
class Image:
    width: int
    height: int
    channels: int
    rows: list[bytes]  # unfiltered scanlines

    def pixel(self, x: int, y: int) -> tuple[int, ...]:
        c = self.channels
        return tuple(self.rows[y][x * c : x * c + c])


_MOD = tuple(i & 0xFF for i in range(512))


def _unfilter(ftype: int, line: bytes, prev: bytes, bpp: int) -> bytes:
    if ftype == 0:
        return line
    if ftype == 2:  # "up" has no left dependency: let map() run it at C speed
        return bytes(map(_MOD.__getitem__, map(operator.add, line, prev)))
    out = bytearray(line)
    n = len(out)
    if ftype == 4:  # Paeth, inlined: it is most of Chromium's rows and this loop is hot
        for i in range(min(bpp, n)):
            out[i] = (out[i] + prev[i]) & 0xFF
        for i in range(bpp, n):
            a, b, c = out[i - bpp], prev[i], prev[i - bpp]
            pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - c - c)
            pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            out[i] = (out[i] + pred) & 0xFF
        return bytes(out)
    for i in range(n):
        a = out[i - bpp] if i >= bpp else 0
        out[i] = (out[i] + (a if ftype == 1 else (a + prev[i]) >> 1)) & 0xFF
    return bytes(out)


def read(path: Path) -> Image:
    data = path.read_bytes()
    if not data.startswith(SIGNATURE):
        raise ValueError(f"{path}: not a PNG file")
    pos, idat, header = len(SIGNATURE), bytearray(), None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if (
            zlib.crc32(kind + body)
            != struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])[0]
        ):
            raise ValueError(f"{path}: bad CRC in {kind!r} chunk")
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + length
    if header is None:
        raise ValueError(f"{path}: no IHDR chunk")
    width, height, depth, ctype, _comp, _filt, interlace = header
    if depth != 8 or ctype not in _CHANNELS or interlace:
        raise ValueError(f"{path}: unsupported PNG (depth {depth}, type {ctype}, il {interlace})")
    bpp = _CHANNELS[ctype]
    raw = zlib.decompress(bytes(idat))
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytes(stride)
    for y in range(height):
        start = y * (stride + 1)
        line = _unfilter(raw[start], raw[start + 1 : start + 1 + stride], prev, bpp)
        rows.append(line)
        prev = line
    return Image(width, height, bpp, rows)


def write(path: Path, img: Image) -> None:
    """Encode (filter 0); used to keep crops of a screenshot."""
    ctype = {3: 2, 4: 6, 1: 0, 2: 4}[img.channels]

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    raw = b"".join(b"\x00" + r for r in img.rows)
    path.write_bytes(
        SIGNATURE
        + chunk(b"IHDR", struct.pack(">IIBBBBB", img.width, img.height, 8, ctype, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw, 6))
        + chunk(b"IEND", b"")
    )


def crop(img: Image, top: int, bottom: int) -> Image:
    return Image(img.width, bottom - top, img.channels, img.rows[top:bottom])
