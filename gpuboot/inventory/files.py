"""The files Ansible would read for an inventory, checked before it reads any: every
inventory source and group_vars/host_vars file must be a regular, bounded UTF-8 file
whose YAML neither nests too deep nor expands into an alias bomb (Ansible has no bound:
one took ~100 s and ~4 GB before it failed)."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from gpuboot.errors import ConfigError
from gpuboot.yamlsafe import SAFE_LOADER, check_yaml_bounds

# Bounds on what one inventory or vars file may cost to read (Ansible has none: an
# alias bomb took ~100 s and ~4 GB before it failed).
MAX_FILE_BYTES = 8 << 20
MAX_YAML_VALUES = 2_000_000  # scalars and collections, once every alias is expanded
MAX_YAML_DEPTH = 200  # libyaml's composer recurses in C: far deeper nesting crashes it
MAX_FILES = 10_000  # in an inventory directory, or under one *_vars/ directory
VARS_DIRS = ("group_vars", "host_vars")
VARS_EXTS = ("", ".yml", ".yaml", ".json")  # what Ansible's host_group_vars reads
YAML_FIX = "fix the YAML; inventory/sample.yml shows the expected layout"


def check_files(path: Path) -> None:
    """Every inventory source and group_vars/host_vars file Ansible would read."""
    if path.is_dir():
        for source in _counted(_inventory_files(path, set()), path):
            _check_source(source, top=False)
    else:
        _check_source(path, top=True)
    base = path if path.is_dir() else path.parent  # where Ansible looks for *_vars/
    for sub in VARS_DIRS:
        if (base / sub).is_dir():
            for file in _counted(_vars_files(base / sub, set(), top=True), base / sub):
                _check_vars_file(file)


def _counted(files, root: Path):
    """At most MAX_FILES of them: a link to / in group_vars/ must not walk the disk."""
    for count, file in enumerate(files, start=1):
        if count > MAX_FILES:
            raise ConfigError(
                f"holds more than {MAX_FILES} files",
                where=str(root),
                hint="remove what Ansible should not read (a link to a large directory?)",
            )
        yield file


def _inventory_files(directory: Path, seen: set[Path]):
    """The files Ansible parses as sources of an inventory directory (recursively,
    skipping what it ignores: hidden names, *_vars/, README.md, *.orig...)."""
    from ansible.inventory.manager import IGNORED

    real = directory.resolve()
    if real in seen:  # a link back up the tree
        return
    seen.add(real)
    for entry in sorted(directory.iterdir()):
        if IGNORED.search(os.fsencode(entry.name)):
            continue
        if entry.is_dir():
            yield from _inventory_files(entry, seen)
        else:
            yield entry


def _vars_files(directory: Path, seen: set[Path], *, top: bool):
    """The files Ansible's host_group_vars plugin may load: <entity>(.yml|.yaml|.json)
    and every file of an <entity>/ directory (no hidden or backup files; nested
    directories and files only without an extension or with a YAML one)."""
    real = directory.resolve()
    if real in seen:
        return
    seen.add(real)
    for entry in sorted(directory.iterdir()):
        if entry.name.startswith(".") or entry.name.endswith("~"):
            continue
        ext = os.path.splitext(entry.name)[1]
        if entry.is_dir():
            if top or not ext:
                yield from _vars_files(entry, seen, top=False)
        elif ext in VARS_EXTS:
            yield entry


def _check_source(file: Path, *, top: bool) -> None:
    st = _regular_file(file)
    yaml_ext = file.suffix in (".yml", ".yaml", ".json")
    if st.st_mode & 0o111 and not yaml_ext:
        return  # an inventory script: Ansible runs it, the operator's own program
    text = _read_text(file)
    if top and not text.strip():
        raise ConfigError(
            "inventory file is empty",
            where=str(file),
            hint="list hosts under `all: hosts:`; see inventory/sample.yml",
        )
    if _vaulted(text):
        return  # Ansible decrypts it; nothing to read here
    if not yaml_ext:
        # Ansible's yaml plugin also tries files without an extension; else it is INI.
        with contextlib.suppress(yaml.YAMLError):
            _check_yaml_bounds(file, text)
        return
    data = _yaml_document(file, text, "inventory")
    if not isinstance(data, dict) and (top or data is not None):
        raise ConfigError(
            "inventory must be a mapping of groups (e.g. `all:` with `hosts:`)",
            where=str(file),
            hint="see inventory/sample.yml",
        )


def _check_vars_file(file: Path) -> None:
    _regular_file(file)
    text = _read_text(file)
    if _vaulted(text):
        return
    data = _yaml_document(file, text, "variables file")
    if data is not None and not isinstance(data, dict):
        raise ConfigError(
            f"variables file is not a mapping (it holds a {type(data).__name__})",
            where=str(file),
            hint="write `name: value` lines: Ansible merges the file into its group's or "
            "host's variables",
        )


def _vaulted(text: str) -> bool:
    return text.lstrip().startswith("$ANSIBLE_VAULT;")


def _unreadable(file: Path, exc: OSError) -> ConfigError:
    return ConfigError(
        f"cannot read: {exc.strerror or exc}",
        where=str(file),
        hint="fix the path or its permissions",
    )


def _regular_file(file: Path) -> os.stat_result:
    """A FIFO or a device would hang the read or never end: only regular files."""
    try:
        st = file.stat()
    except OSError as exc:
        raise _unreadable(file, exc) from exc
    if not stat.S_ISREG(st.st_mode) or file.resolve().parts[1:2] in (("proc",), ("sys",)):
        raise ConfigError(
            "is not a regular file (a FIFO, a device or a /proc or /sys file would hang "
            "the read or never end)",
            where=str(file),
            hint="inventories and their *_vars/ hold regular files only",
        )
    return st


def _read_text(file: Path) -> str:
    """The file as UTF-8 text, at most MAX_FILE_BYTES; binary or other encodings refused."""
    try:
        with open(file, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise _unreadable(file, exc) from exc
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(
            f"file is larger than {MAX_FILE_BYTES >> 20} MiB",
            where=str(file),
            hint="split the inventory into a directory of smaller files",
        )
    if b"\0" in data:
        raise ConfigError(
            "is a binary file, not YAML or INI text",
            where=f"{file}:{_line_of(data, data.index(0))}",
            hint="remove it from the inventory (or from group_vars/host_vars)",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"is not UTF-8 text (byte 0x{data[exc.start]:02x})",
            where=f"{file}:{_line_of(data, exc.start)}",
            hint="save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)",
        ) from exc


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


class _VarsLoader(SAFE_LOADER):  # type: ignore[misc, valid-type]
    """Safe YAML that reads Ansible's own tags (!vault, !unsafe) as plain values."""


def _plain(loader, _suffix, node):
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)


_VarsLoader.add_multi_constructor("!", _plain)


def _yaml_document(file: Path, text: str, what: str) -> Any:
    """The file's data: JSON first (as Ansible tries), else bounded YAML."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    try:
        _check_yaml_bounds(file, text)
        return yaml.load(text, Loader=_VarsLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else str(file)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(
            f"{what} is not valid YAML ({problem})", where=where, hint=YAML_FIX
        ) from exc


def _check_yaml_bounds(file: Path, text: str) -> None:
    """yamlsafe's bounds at the inventory's own limits: Ansible reads what gpuboot reads."""
    check_yaml_bounds(text, str(file), max_depth=MAX_YAML_DEPTH, max_values=MAX_YAML_VALUES)
