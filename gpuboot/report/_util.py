"""Helpers shared by the report writers: statuses, number formatting, atomic files."""

from __future__ import annotations

import math
import os
import re
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuboot.verdict import VERDICTS, Status

# The report writers' short names for the one verdict vocabulary (gpuboot.verdict).
PASS, WARN, FAIL, ERROR, SKIPPED = Status
STATUSES = VERDICTS  # a node's verdict, a measurement's status
RULE_STATUSES = tuple(Status)

# XML 1.0 forbids most C0 controls; tool output (ANSI colours, NULs) may carry them.
_XML_BAD = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_safe(text: Any) -> str:
    """Text an XML 1.0 document may hold: forbidden characters become U+FFFD."""
    return _XML_BAD.sub("\ufffd", "" if text is None else str(text))


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def measurement_status(m: dict[str, Any]) -> str:
    """The status a measurement carries, or the one its bands give (missing value = ERROR)."""
    if m.get("status") in STATUSES:
        return m["status"]
    value = m.get("value")
    if not is_number(value):
        return ERROR
    if is_number(m.get("fail_below")) and value < m["fail_below"]:
        return FAIL
    if is_number(m.get("warn_below")) and value < m["warn_below"]:
        return WARN
    return PASS


def fmt_num(value: Any) -> str:
    """Human figure: 3 significant digits below 100, none above ("52.1", "450", "0.125")."""
    if not is_number(value):
        return "n/a"
    v = float(value)
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:.0f}"
    text = f"{v:.{max(0, 2 - math.floor(math.log10(abs(v))))}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def fmt_measure(value: Any, unit: str | None) -> str:
    return f"{fmt_num(value)} {unit}".strip() if unit else fmt_num(value)


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str) -> datetime:
    """Inverse of iso(); raises ValueError on anything else."""
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def atomic_write(path: Path, data: bytes, *, mode: int = 0o644) -> Path:
    """Write via a hidden temp file in the same directory and rename: readers (the
    node_exporter textfile collector, a CI upload) never see a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def host_key(host: Any) -> tuple[Any, ...]:
    """Natural order for host names: node2 < node10 (digit runs compare as numbers)."""
    parts = re.split(r"(\d+)", str(host))
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p.lower()) for p in parts if p)
