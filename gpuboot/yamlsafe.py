"""Files gpuboot is pointed at, read within bounds; YAML with libyaml's C loader.

A stack, a profile, a kubeconfig, a certificate or mirror metadata is read only when it is
a regular file reached by its own name: a FIFO or a device would hang the read or never
end it, and a link leads somewhere the operator did not name. It is read up to a size cap
(the read stops there, whatever the file claims), decoded as UTF-8 with a bad byte named
by its offset (the file itself is never echoed), and its nesting bounded: deep nesting
exhausts the parsers' recursion, and an alias bomb expands without end.

YAML uses libyaml's C loader where PyYAML has it: stacks, profiles and the component table
are read on every run, about 5x faster than the pure-Python loader.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from itertools import compress
from typing import Any

import yaml

from gpuboot.errors import ConfigError

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_DEPTH = 64  # no file gpuboot reads nests half as deep
MAX_YAML_VALUES = 1_000_000  # scalars and collections once every alias is expanded
SMALL_JSON = 64 * 1024  # a document this short is first looked at for its brackets
_CONTAINERS = frozenset({dict, list})
_IS_CONTAINER = _CONTAINERS.__contains__  # a C predicate: no Python call per value


def safe_load(text: str) -> Any:
    """``yaml.safe_load``, C-accelerated: same values, same YAMLError on bad input."""
    return yaml.load(text, Loader=SAFE_LOADER)


def read_capped_bytes(path: str | os.PathLike, limit: int, what: str, *, hint: str) -> bytes:
    """The bytes of the regular file ``path`` (no link, FIFO or device), at most ``limit``.
    ConfigError (bad input) names ``what``, the path and the rule; ``hint`` says what to do."""
    where = f"{what} {path}"
    try:
        # O_NONBLOCK: opening a FIFO does not wait for a writer; O_NOFOLLOW: no link
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a link
            raise ConfigError(
                "is a symbolic link", where=where, hint=f"name the file itself; {hint}"
            ) from None
        raise ConfigError(
            f"cannot read {what}: {exc.strerror or exc}", where=where, hint=hint
        ) from exc
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise ConfigError(
            f"is a {_kind(mode)}, not a regular file",
            where=where,
            hint=f"name a regular file; {hint}",
        )
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ConfigError(f"is larger than {limit} bytes (the cap)", where=where, hint=hint)
    return data


def decode_utf8(data: bytes, where: str, *, hint: str) -> str:
    """``data`` as UTF-8 text; a NUL or an undecodable byte is ConfigError naming its offset."""
    if (nul := data.find(b"\0")) >= 0:
        raise ConfigError(
            f"is binary, not text (a NUL byte at offset {nul}, line {_line_of(data, nul)})",
            where=where,
            hint=hint,
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}, "
            f"line {_line_of(data, exc.start)})",
            where=where,
            hint="save it as UTF-8 (e.g. `iconv -f latin1 -t utf-8 FILE`); " + hint,
        ) from None


def read_capped_text(path: str | os.PathLike, limit: int, what: str, *, hint: str) -> str:
    """read_capped_bytes as UTF-8 text (decode_utf8)."""
    return decode_utf8(read_capped_bytes(path, limit, what, hint=hint), f"{what} {path}", hint=hint)


def loads_json_bounded(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` with nesting bounded (ValueError past ``max_depth``): a deeply nested
    document would otherwise end the decoder with RecursionError, or a later walk of it."""
    try:
        value = json.loads(text)
    except RecursionError:  # the C decoder's own guard, some thousand levels down
        raise ValueError(f"nests deeper than {max_depth} levels") from None
    # a container opens with a bracket: no more of them in the text, no deeper nesting
    # (the many small documents, a history's lines, are passed without a walk; a large
    # one always holds more, and counting them would cost a pass over its text)
    small = len(text) <= SMALL_JSON and _brackets(text) <= max_depth
    if not small and nesting_depth(value, max_depth) > max_depth:
        raise ValueError(f"nests deeper than {max_depth} levels")
    return value


def read_capped_json(
    path: str | os.PathLike, limit: int, what: str, *, hint: str, max_depth: int = MAX_DEPTH
) -> Any:
    """The JSON document in the regular file ``path``, within ``limit`` bytes and
    ``max_depth`` levels; ConfigError otherwise (never a traceback, never the file echoed)."""
    where = f"{what} {path}"
    text = read_capped_text(path, limit, what, hint=hint)
    try:
        return loads_json_bounded(text, max_depth)
    except ValueError as exc:
        raise ConfigError(
            f"is not a JSON document: {_short(exc)}", where=where, hint=hint
        ) from None


def load_yaml_text(text: str, where: str, *, hint: str, max_depth: int = MAX_DEPTH) -> Any:
    """The YAML document ``text``, its nesting and alias expansion bounded (checked in one
    streaming pass before anything is built); ConfigError (bad input) names the line."""
    try:
        check_yaml_bounds(text, where, max_depth)
        return safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f", line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(
            f"not valid YAML: {_short(getattr(exc, 'problem', None) or exc)}",
            where=where + line,
            hint="fix the YAML syntax (indentation, quotes)",
        ) from None


def read_capped_yaml(
    path: str | os.PathLike, limit: int, what: str, *, hint: str, max_depth: int = MAX_DEPTH
) -> Any:
    """The YAML document in the regular file ``path``, within ``limit`` bytes, UTF-8,
    ``max_depth`` levels and MAX_YAML_VALUES once aliases expand; ConfigError otherwise."""
    text = read_capped_text(path, limit, what, hint=hint)
    return load_yaml_text(text, f"{what} {path}", hint=hint, max_depth=max_depth)


def check_yaml_bounds(
    text: str, where: str, max_depth: int = MAX_DEPTH, max_values: int = MAX_YAML_VALUES
) -> None:
    """One pass over the YAML events, stopped at the first bound crossed: nesting depth,
    and the values the document holds once every alias is expanded (a "billion laughs" of
    nine aliases nine deep is 387 million). An alias inside the collection it names would
    make a loader recurse forever."""
    values, depth = 0, 0
    open_anchors: list[str | None] = []
    starts: list[int] = []
    sizes: dict[str, int] = {}  # anchor -> its node's values, once closed
    for event in yaml.parse(text, Loader=SAFE_LOADER):
        line = f"{where}, line {event.start_mark.line + 1}" if event.start_mark else where
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > max_depth:
                raise ConfigError(
                    f"nests deeper than {max_depth} levels", where=line, hint="flatten the data"
                )
            starts.append(values)
            open_anchors.append(event.anchor)
            values += 1
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
            anchor, size = open_anchors.pop(), values - starts.pop()
            if anchor:
                sizes[anchor] = size
        elif isinstance(event, yaml.ScalarEvent):
            values += 1
            if event.anchor:
                sizes[event.anchor] = 1
        elif isinstance(event, yaml.AliasEvent):
            if event.anchor in open_anchors:
                raise ConfigError(
                    f"YAML alias *{event.anchor} refers to itself", where=line, hint="write it out"
                )
            values += sizes.get(event.anchor, 0)
        if values > max_values:
            raise ConfigError(
                f"holds more than {max_values:,} values once its aliases are expanded",
                where=line,
                hint="write the data out without nested aliases (*name)",
            )


def nesting_depth(value: Any, stop: int) -> int:
    """How deep lists and dicts nest in ``value`` (as json.loads builds them: plain dict and
    list), counted up to ``stop`` + 1 at most; walked level by level, without recursion.
    A value is looked at by C iterators only (its type, then kept if a container): a
    report.json holds ten scalars for each container, and a Python step for each value
    cost as much as the parse."""
    level = [value] if type(value) in _CONTAINERS else []
    depth = 0
    while level:
        depth += 1
        if depth > stop:
            break
        below: list[Any] = []
        for item in level:
            items = item.values() if type(item) is dict else item
            below.extend(compress(items, map(_IS_CONTAINER, map(type, items))))
        level = below
    return depth


def _brackets(text: str | bytes) -> int:
    """The opening brackets in a JSON text, those inside strings too (never fewer than
    its nesting depth; a bracket in UTF-16 or -32 text still holds its ASCII byte)."""
    if isinstance(text, str):
        return text.count("[") + text.count("{")
    return text.count(b"[") + text.count(b"{")


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "directory"
    kind = "FIFO" if stat.S_ISFIFO(mode) else "device" if stat.S_ISCHR(mode) else "special file"
    return f"{kind} (its read could hang or never end)"


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def _short(exc: object, limit: int = 200) -> str:
    """An error's text cut short: a parser may quote the input it choked on."""
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + "…"
