"""Kernel module facts: ``lsmod``, ``/proc/driver/nvidia/version`` and ``modinfo``.

The proc file names the flavour: "NVIDIA UNIX x86_64 Kernel Module  550.54.15  <date>"
(proprietary) vs "NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build ..."
(open GPU kernel modules) — fabric manager and some features care which one is loaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpuboot.errors import ParseError
from gpuboot.evidence._common import require_text


@dataclass(frozen=True)
class LoadedModule:
    name: str
    size_bytes: int
    use_count: int
    used_by: tuple[str, ...]


def parse_lsmod(text: str) -> dict[str, LoadedModule]:
    tool = "lsmod"
    require_text(tool, text)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if lines and lines[0].split()[:2] == ["Module", "Size"]:
        lines = lines[1:]
    mods: dict[str, LoadedModule] = {}
    for ln in lines:
        toks = ln.split()
        if len(toks) < 3 or not toks[1].isdigit() or not toks[2].lstrip("-").isdigit():
            raise ParseError(tool, f"unreadable lsmod line: {ln.strip()[:80]!r}")
        used_by = tuple(t for t in toks[3].split(",") if t) if len(toks) > 3 else ()
        mods[toks[0]] = LoadedModule(toks[0], int(toks[1]), int(toks[2]), used_by)
    if not mods:
        raise ParseError(tool, "no modules listed")
    return mods


@dataclass(frozen=True)
class NvidiaDriverVersion:
    version: str  # "550.54.15"
    flavor: str  # "proprietary" or "open"
    arch: str | None
    build: str | None  # trailing text: build date or "Release Build (builder) date"
    gcc: str | None


_PROP = re.compile(r"NVRM version:\s*NVIDIA UNIX (\S+) Kernel Module\s+(\d+(?:\.\d+)+)\s*(.*)$")
_OPEN = re.compile(
    r"NVRM version:\s*NVIDIA UNIX Open Kernel Module for (\S+)\s+(\d+(?:\.\d+)+)\s*(.*)$"
)


def parse_nvidia_version(text: str) -> NvidiaDriverVersion:
    tool = "/proc/driver/nvidia/version"
    require_text(tool, text)
    gcc = next(
        (ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("GCC version")),
        None,
    )
    for line in text.splitlines():
        if m := _OPEN.search(line):
            return NvidiaDriverVersion(
                m.group(2), "open", m.group(1), m.group(3).strip() or None, gcc
            )
        if m := _PROP.search(line):
            return NvidiaDriverVersion(
                m.group(2), "proprietary", m.group(1), m.group(3).strip() or None, gcc
            )
    raise ParseError(tool, "no 'NVRM version:' line", hint="is the nvidia module loaded?")


@dataclass(frozen=True)
class ModInfo:
    fields: dict[str, tuple[str, ...]] = field(default_factory=dict)  # repeated keys kept

    def get(self, key: str) -> str | None:
        vals = self.fields.get(key)
        return vals[0] if vals else None

    @property
    def name(self) -> str | None:
        return self.get("name")

    @property
    def version(self) -> str | None:
        return self.get("version")

    @property
    def filename(self) -> str | None:
        return self.get("filename")

    @property
    def vermagic(self) -> str | None:
        return self.get("vermagic")

    @property
    def depends(self) -> tuple[str, ...]:
        return tuple(d for d in (self.get("depends") or "").split(",") if d)


def parse_modinfo(text: str) -> ModInfo:
    tool = "modinfo"
    require_text(tool, text)
    if re.search(r"modinfo: ERROR: Module \S+ not found", text):
        raise ParseError(tool, text.strip().splitlines()[0], hint="module is not installed")
    fields: dict[str, list[str]] = {}
    key = None
    for ln in text.splitlines():
        m = re.match(r"^([A-Za-z_][\w.-]*):\s*(.*)$", ln)
        if m:
            key = m.group(1)
            fields.setdefault(key, []).append(m.group(2).strip())
        elif ln.strip() and key:  # wrapped signature lines continue the previous key
            fields[key][-1] += ln.strip()
    if "filename" not in fields and "vermagic" not in fields:
        raise ParseError(tool, "no filename/vermagic field", hint="is this modinfo output?")
    return ModInfo({k: tuple(v) for k, v in fields.items()})
