"""Small helpers shared by the evidence parsers (value cleaning, number parsing)."""

from __future__ import annotations

import functools
import re

from gpuboot.errors import ParseError

# Values nvidia-smi and friends print when a field has no value on this GPU/driver.
NA_WORDS = frozenset(
    {
        "",
        "n/a",
        "na",
        "none available",
        "not supported",
        "unknown error",
        "requested functionality has been deprecated",
        "insufficient permissions",
    }
)

# An author's elision line in a published excerpt ("[...]"). No tool prints one: only a
# bundle marked as an excerpt (meta.json "excerpt": true) may carry it (checks/base.py).
ELISION = re.compile(r"^\[\s*(?:\.\.\.|…)\s*\]$")
_ELISION_LINE = re.compile(r"^[ \t]*\[\s*(?:\.\.\.|…)\s*\][ \t]*$", re.M)


def has_elision(text: str) -> bool:
    """True when ``text`` holds an elision line (cheap unless it holds "..." or "…")."""
    return ("..." in text or "…" in text) and bool(_ELISION_LINE.search(text))


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_NUM = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def strip_ansi(text: str) -> str:
    """Remove terminal escape sequences (nvidia-smi underlines headers on a tty)."""
    return _ANSI.sub("", text)


def clean(value: str | None) -> str | None:
    """Trim a value; N/A-style markers (bracketed or not) become None."""
    if value is None:
        return None
    v = value.strip()
    bare = v[1:-1].strip() if v.startswith("[") and v.endswith("]") else v
    if bare.lower() in NA_WORDS:
        return None
    # csv output brackets every non-value: "[N/A]", "[Not Supported]", "[GPU requires reset]".
    if v.startswith("[") and v.endswith("]"):
        return None
    return v


def to_float(value: str | None) -> float | None:
    """Leading number of a value ("69.85 W" -> 69.85); None if absent or N/A."""
    v = clean(value)
    if v is None:
        return None
    m = _NUM.match(v)
    return float(m.group(0)) if m else None


def to_int(value: str | None) -> int | None:
    """Leading integer of a value ("16x" -> 16, "2560 bank(s)" -> 2560, "0x1F" -> 31)."""
    v = clean(value)
    if v is None:
        return None
    if re.match(r"^0[xX][0-9a-fA-F]+$", v):
        return int(v, 16)
    m = _NUM.match(v)
    if not m:
        return None
    num = float(m.group(0))
    return int(num) if num.is_integer() else None


_TRUE = {"yes", "enabled", "active", "on", "true", "enable"}
_FALSE = {"no", "disabled", "not active", "off", "false", "disable"}


def to_bool(value: str | None) -> bool | None:
    """Yes/Enabled/Active -> True, No/Disabled/Not Active -> False, else None."""
    v = clean(value)
    if v is None:
        return None
    low = v.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    return None


def require_text(tool: str, text: str) -> str:
    """Reject empty output up front: an empty probe file is never a clean result."""
    if not isinstance(text, str):
        raise ParseError(tool, f"expected text, got {type(text).__name__}")
    if not text.strip():
        raise ParseError(
            tool, "output is empty", hint="re-run the probe; the command printed nothing"
        )
    return text


_NOT_SNAKE = re.compile(r"[^a-z0-9]+")


@functools.lru_cache(maxsize=4096)  # a fleet's counter names are few; evaluate calls it per line
def snake(name: str) -> str:
    """'Replay Errors' -> 'replay_errors' (stable keys for free-form counter names)."""
    return _NOT_SNAKE.sub("_", name.strip().lower()).strip("_")
