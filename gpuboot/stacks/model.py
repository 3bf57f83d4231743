"""Stack files as data: the frozen model and the schema check that builds it.

A stack pins one supported combination of the components of gpuboot/components.yaml
(kernel, NVIDIA driver, fabric manager, NSCQ, CUDA, DOCA-OFED, GPUDirect Storage,
nvidia_peermem, container toolkit, DCGM), with exact package names and versions per OS
family, as a table keyed by component (``Stack.parts``). An optional component a stack
file leaves out is disabled. The schema is in README.md.
Every schema fault is a ConfigError naming the file, the key and the fix; reading a
stack collects every one (``read_stack``), and loading one raises them all at once
(StackFaults), so an operator fixes a file in one pass.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn

from gpuboot.components import OS_FAMILIES
from gpuboot.components import components as component_table
from gpuboot.errors import ConfigError
from gpuboot.stacks.versions import PACKAGE_VERSION_RE, UPSTREAM_RE, upstream_of
from gpuboot.yamlsafe import read_capped_yaml

SCHEMA = 1
FLAVORS = ("open", "proprietary")
HOLD_METHODS = {"debian": ("apt-mark",), "redhat": ("dnf-versionlock",)}
MAX_STACK_BYTES = 1024 * 1024  # a shipped stack is under 10 KB
STACK_FILE_HINT = "name a stack file (UTF-8 YAML), or a shipped stack (gpuboot/stacks/*.yaml)"
# Every component of gpuboot/components.yaml, in install order (the stack file's keys),
# those with pins, and those with pins a stack may disable (or leave out).
PARTS = tuple(c.name for c in component_table())
COMPONENTS = tuple(c.name for c in component_table() if c.pinned)
OPTIONAL_COMPONENTS = tuple(c.name for c in component_table() if c.pinned and c.optional)
_OPTIONAL = frozenset(c.name for c in component_table() if c.optional)

_NAME_RE = {
    "debian": re.compile(r"^[a-z0-9][a-z0-9+.-]+$"),
    "redhat": re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$"),
}
_STACK_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9.-]*$")
_BRANCH_RE = re.compile(r"^\d{3}$")
_KERNEL_RELEASE_RE = re.compile(r"^\d+\.\d+\.\d+-[A-Za-z0-9._+-]+$")
_DISTRO_RE = re.compile(r"^(ubuntu\d\d\.\d\d|debian\d+|rhel\d+\.\d+|rocky\d+\.\d+)$")
_VERSION_EXAMPLE = {"debian": "550.54.15-1 or 1:3.3.9", "redhat": "3:550.54.15-1.el9"}


@dataclass(frozen=True)
class Package:
    name: str
    version: str


@dataclass(frozen=True, kw_only=True)
class Pins:
    """One component's packages for one OS family: the main package and its companions."""

    package: str
    version: str
    depends: tuple[Package, ...] = ()
    module_stream: str | None = None  # dnf module stream (NVIDIA's RHEL driver packages)

    @property
    def packages(self) -> tuple[Package, ...]:
        return (Package(self.package, self.version), *self.depends)


@dataclass(frozen=True, kw_only=True)
class KernelPins(Pins):
    distro: str  # ubuntu22.04, debian12, rhel9.4...
    release: str  # what `uname -r` prints once this kernel runs
    hold: str  # apt-mark | dnf-versionlock
    hold_packages: tuple[str, ...] = ()  # meta packages that would pull a newer kernel


@dataclass(frozen=True, kw_only=True)
class Component:
    name: str
    enabled: bool
    version: str | None  # upstream version (None for the kernel: per family)
    pins: dict[str, Pins]

    def pins_for(self, os_family: str) -> Pins:
        check_os_family(os_family)
        return self.pins[os_family]


@dataclass(frozen=True, kw_only=True)
class Driver(Component):
    branch: str
    flavor: str  # open | proprietary


@dataclass(frozen=True, kw_only=True, init=False)
class Stack:
    name: str
    description: str
    path: Path
    label: str  # how messages name the file
    profiles: tuple[str, ...]
    # component -> its pins and settings, every component of the table in its order (one
    # the file left out is there, disabled); a switch (pinned: false) has no pins
    parts: Mapping[str, Component]

    def __init__(
        self,
        *,
        name: str,
        description: str,
        path: Path,
        label: str,
        profiles: tuple[str, ...],
        parts: Mapping[str, Component] = MappingProxyType({}),
        **by_name: Component,
    ):
        """``by_name`` (``cuda=...``) puts single components over ``parts``, as
        ``dataclasses.replace(stack, cuda=...)`` passes them."""
        if unknown := sorted(set(by_name) - set(PARTS)):
            raise TypeError(f"Stack has no component {unknown[0]!r}")
        merged = {**parts, **by_name}
        table = {n: merged[n] for n in PARTS if n in merged}
        for field, value in (
            ("name", name),
            ("description", description),
            ("path", path),
            ("label", label),
            ("profiles", profiles),
            ("parts", MappingProxyType(table)),
        ):
            object.__setattr__(self, field, value)

    def __getattr__(self, name: str) -> Component:
        """A component by its table name: ``stack.cuda``."""
        parts = self.__dict__.get("parts", {})
        if name in parts:
            return parts[name]
        raise AttributeError(name)

    @property
    def driver(self) -> Driver:
        return self.parts["driver"]  # type: ignore[return-value]  # the reader builds a Driver

    def kernel_pins(self, os_family: str) -> KernelPins:
        pins = self.parts["kernel"].pins_for(os_family)
        assert isinstance(pins, KernelPins | Unread)  # the reader builds kernel pins as such
        return pins

    def components(self) -> list[Component]:
        """The components with pins, in install order, enabled or not."""
        return [self.parts[name] for name in COMPONENTS]

    @property
    def cuda_major_minor(self) -> tuple[int, int]:
        major, minor = (int(p) for p in str(self.parts["cuda"].version).split(".")[:2])
        return major, minor


def check_os_family(os_family: str) -> None:
    if os_family not in OS_FAMILIES:
        raise ConfigError(
            f"unknown OS family {os_family!r}",
            where="os_family",
            hint=f"use one of {', '.join(OS_FAMILIES)} (Debian/Ubuntu apt, RHEL/Rocky dnf)",
        )


# ---------------------------------------------------------------- unread values
class NotRead(Exception):
    """A compatibility rule used a value whose key has a schema fault (see Unread)."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


class Unread:
    """Stands in the model for a value whose key has a schema fault (the fault itself is
    listed). Any use of it -- compare, test, format, iterate, an attribute -- raises
    NotRead, so a rule that needs the value is left unjudged, never judged on a guess."""

    __slots__ = ("key",)

    def __init__(self, key: str):
        self.key = key

    def __repr__(self) -> str:
        return f"<unread {self.key}>"

    def _refuse(self, *_args: Any) -> NoReturn:
        raise NotRead(self.key)

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse  # type: ignore[assignment]
    __hash__ = __bool__ = __str__ = __format__ = __len__ = __iter__ = _refuse  # type: ignore[assignment]
    __contains__ = __getitem__ = __int__ = __index__ = __float__ = _refuse

    def __getattr__(self, name: str) -> NoReturn:
        if name.startswith("__"):  # copy, pickle and friends probe for optional hooks
            raise AttributeError(name)
        raise NotRead(self.key)


def known(*values: Any) -> bool:
    """None of ``values`` is Unread (a cross-key check needs every value it compares)."""
    return not any(isinstance(v, Unread) for v in values)


class StackFaults(ConfigError):
    """A stack file that does not read: every schema fault in one error (``faults``, each
    naming the file, the key and the fix), and what did read (``stack``, its faulty values
    Unread; None when nothing did) so `matrix check` can still judge the rules."""

    def __init__(self, label: str, faults: list[ConfigError], stack: Stack | None):
        # ``where`` and ``hint`` stay the first fault's (the key to fix first); the
        # message goes on to list every fault with its key and fix
        first = faults[0]
        message, hint = first.message, first.hint
        if len(faults) > 1:
            prefix = f"{label}: "
            message += f"; {len(faults)} schema faults in all:" + "".join(
                f"\n  {(f.where or '').removeprefix(prefix)}: {f.message} (fix: {f.hint})"
                for f in faults
            )
            hint = (
                f"{hint}; then fix the others as listed (`gpuboot matrix check {label}` "
                "also judges the compatibility rules)"
            )
        super().__init__(message, where=first.where, hint=hint)
        self.label = label
        self.faults = tuple(faults)
        self.stack = stack


# ---------------------------------------------------------------- schema reader
class _Reader:
    """Checks one parsed stack file, each fault naming ``<file>: <key>`` and the fix.
    With ``collect`` it collects every fault (``faults``) and a faulty value reads as
    Unread; a value that is Unread already (its mapping was faulty) passes through with
    no second fault. Without, the first fault raises (inventory.py's driver pins)."""

    def __init__(self, label: str, *, collect: bool = False):
        self.label = label
        self.collect = collect
        self.faults: list[ConfigError] = []

    def error(self, key: str, message: str, hint: str) -> ConfigError:
        return ConfigError(message, where=f"{self.label}: {key}", hint=hint)

    def fault(self, key: str, message: str, hint: str) -> Unread:
        err = self.error(key, message, hint)
        if not self.collect:
            raise err
        self.faults.append(err)
        return Unread(key)

    def mapping(
        self, value: Any, key: str, required: tuple[str, ...], optional: tuple[str, ...] = ()
    ) -> dict[str, Any] | Unread:
        """The known keys of ``value``; a missing required key reads as Unread."""
        shown = key or "top level"
        if isinstance(value, Unread):
            return value
        if not isinstance(value, dict):
            return self.fault(shown, "must be a mapping", f"write {shown} as `key: value` lines")
        allowed = set(required) | set(optional)
        for k in value:
            if k not in allowed:
                self.fault(
                    _join(key, str(k)),
                    f"unknown key {k!r}",
                    "remove it or fix its spelling; keys allowed here: "
                    + ", ".join(sorted(allowed)),
                )
        data = {k: v for k, v in value.items() if k in allowed}
        for k in required:
            if k not in value:
                data[k] = self.fault(_join(key, k), f"missing key {k!r}", f"add {_join(key, k)}")
        return data

    def string(
        self, value: Any, key: str, pattern: re.Pattern[str] | None, example: str
    ) -> str | Unread:
        if isinstance(value, Unread):
            return value
        if not isinstance(value, str):
            return self.fault(
                key,
                f"must be a string, got {type(value).__name__} {value!r}",
                f"quote it (YAML reads bare numbers as numbers), e.g. {key.split('.')[-1]}: "
                f'"{example}"',
            )
        # fullmatch: a pattern's `$` would let one trailing line break through
        if pattern is not None and not pattern.fullmatch(value):
            return self.fault(key, f"malformed value {value!r}", f"write it like {example!r}")
        return value

    def boolean(self, value: Any, key: str) -> bool | Unread:
        if isinstance(value, Unread | bool):
            return value
        return self.fault(key, f"must be true or false, got {value!r}", "write true or false")

    def strings(self, value: Any, key: str) -> tuple[str, ...] | Unread:
        if isinstance(value, Unread):
            return value
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return self.fault(key, "must be a list of strings", f"write {key} as [a, b]")
        return tuple(value)


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _read_pins(r: _Reader, raw: Any, key: str, family: str, upstream: Any) -> Pins | Unread:
    kernel = key.startswith("kernel.")
    required = ("package", "version")
    optional: tuple[str, ...] = ("depends",)
    if kernel:
        required += ("distro", "release", "hold")
        optional += ("hold_packages",)
    elif family == "redhat" and key.startswith("driver."):
        optional += ("module_stream",)
    data = r.mapping(raw, key, required, optional)
    if isinstance(data, Unread):
        return data
    name_re, version_re = _NAME_RE[family], PACKAGE_VERSION_RE[family]
    package = r.string(data["package"], f"{key}.package", name_re, "nvidia-driver-550-open")
    version = r.string(data["version"], f"{key}.version", version_re, _VERSION_EXAMPLE[family])
    if upstream is not None and known(version, upstream) and upstream_of(version) != upstream:
        version = r.fault(
            f"{key}.version",
            f"package version {version!r} is not upstream version {upstream!r}",
            f"make the package version {upstream}-<revision>, or change the component's "
            "version to match",
        )
    items = r.strings(data.get("depends", []), f"{key}.depends")
    depends: tuple[Package, ...] | Unread = items if isinstance(items, Unread) else ()
    for i, item in enumerate(() if isinstance(items, Unread) else items):
        # "name" shares the main package's version; "name=version" pins its own.
        name, sep, own = item.partition("=")
        item_key = f"{key}.depends[{i}]"
        checked = r.string(name, item_key, name_re, "nvidia-utils-550")
        if sep:
            version_of = r.string(own, item_key, version_re, f"{name}={_VERSION_EXAMPLE[family]}")
        else:
            version_of = version
        depends = (*depends, Package(checked, version_of))  # type: ignore[arg-type]
    if not kernel:
        stream = data.get("module_stream")
        if stream is not None:
            stream = r.string(
                stream,
                f"{key}.module_stream",
                re.compile(r"^[\w-]+:[\w.-]+$"),
                "nvidia-driver:550-open",
            )
        return Pins(package=package, version=version, depends=depends, module_stream=stream)  # type: ignore[arg-type]
    hold = r.string(data["hold"], f"{key}.hold", None, HOLD_METHODS[family][0])
    if known(hold) and hold not in HOLD_METHODS[family]:
        hold = r.fault(
            f"{key}.hold",
            f"unknown hold method {hold!r} for {family}",
            f"use {' or '.join(HOLD_METHODS[family])}",
        )
    return KernelPins(  # type: ignore[arg-type]
        package=package,
        version=version,
        depends=depends,
        distro=r.string(data["distro"], f"{key}.distro", _DISTRO_RE, "ubuntu22.04"),
        release=r.string(
            data["release"], f"{key}.release", _KERNEL_RELEASE_RE, "5.15.0-119-generic"
        ),
        hold=hold,
        hold_packages=r.strings(data.get("hold_packages", []), f"{key}.hold_packages"),
    )


def _read_component(
    r: _Reader, raw: Any, name: str, extra: tuple[str, ...] = ()
) -> Component | Unread:
    optional_component = name in _OPTIONAL
    if name not in COMPONENTS:  # a switch: the stack turns it on or off, nothing to pin
        data = r.mapping(raw, name, ("enabled",))
        if isinstance(data, Unread):
            return data
        enabled = r.boolean(data["enabled"], f"{name}.enabled")
        return Component(name=name, enabled=enabled, version=None, pins={})  # type: ignore[arg-type]
    if optional_component and isinstance(raw, dict) and raw.get("enabled") is False:
        r.mapping(raw, name, ("enabled",), ("version", *OS_FAMILIES, *extra))
        return _disabled(name)
    has_version = name != "kernel"
    required = (*(("version",) if has_version else ()), *OS_FAMILIES, *extra)
    optional = ("enabled",) if optional_component else ()
    data = r.mapping(raw, name, required, optional)
    if isinstance(data, Unread):
        return data
    # a component that is not `enabled: false` is enabled; a non-boolean is not known
    enabled = r.boolean(data["enabled"], f"{name}.enabled") if "enabled" in data else True
    version = (
        r.string(data["version"], f"{name}.version", UPSTREAM_RE, "12.4.1") if has_version else None
    )
    pins = {f: _read_pins(r, data[f], f"{name}.{f}", f, version) for f in OS_FAMILIES}
    return Component(name=name, enabled=enabled, version=version, pins=pins)  # type: ignore[arg-type]


def _disabled(name: str) -> Component:
    return Component(name=name, enabled=False, version=None, pins={})


def _read_driver(r: _Reader, raw: Any) -> Driver | Unread:
    base = _read_component(r, raw, "driver", ("branch", "flavor"))
    if isinstance(base, Unread):
        return base
    # base read, so raw is a mapping; a missing branch or flavor is a fault already
    branch = r.string(
        raw.get("branch", Unread("driver.branch")), "driver.branch", _BRANCH_RE, "550"
    )
    flavor = r.string(raw.get("flavor", Unread("driver.flavor")), "driver.flavor", None, "open")
    if known(flavor) and flavor not in FLAVORS:
        flavor = r.fault("driver.flavor", f"unknown flavor {flavor!r}", "use open or proprietary")
    version = base.version
    if known(version, branch) and not str(version).startswith(f"{branch}."):
        # which of the two is wrong is the operator's call: neither is used
        version = r.fault(
            "driver.version",
            f"driver {version} is not on branch {branch}",
            f"set driver.branch to {str(version).split('.')[0]!r} or pick a {branch}.x driver",
        )
        branch = Unread("driver.branch")
    return Driver(  # type: ignore[arg-type]
        name="driver",
        enabled=True,
        version=version,
        pins=base.pins,
        branch=branch,
        flavor=flavor,
    )


def read_stack(data: Any, path: Path, label: str) -> tuple[Stack | None, list[ConfigError]]:
    """Check a parsed stack document: the Stack and every schema fault. With faults, the
    Stack holds Unread for each faulty value (None when the document is no mapping)."""
    r = _Reader(label, collect=True)
    top = r.mapping(data, "", ("schema", "name", "description", "profiles"), tuple(PARTS))
    if isinstance(top, Unread):
        return None, r.faults
    if known(top["schema"]) and top["schema"] != SCHEMA:
        r.fault("schema", f"unsupported schema {top['schema']!r}", f"set schema: {SCHEMA}")
    name = r.string(top["name"], "name", _STACK_NAME_RE, "lts-550-cuda12.4")
    if known(name) and name != path.stem:
        name = r.fault(
            "name",
            f"name {name!r} differs from the file name {path.name!r}",
            f"rename the file to {name}.yaml or set name: {path.stem}",
        )
    parts = {c: _read_part(r, top, c) for c in PARTS}
    stack = Stack(  # type: ignore[arg-type]
        name=name,
        description=r.string(top["description"], "description", None, "what it is for"),
        path=path,
        label=label,
        profiles=r.strings(top["profiles"], "profiles"),
        parts=parts,
    )
    return stack, r.faults


def _read_part(r: _Reader, top: dict[str, Any], name: str) -> Component | Unread:
    """One component of the table from the stack file: an optional one left out is
    disabled; one a stack must carry and does not is a fault naming the key to add."""
    if name not in top:
        if name in _OPTIONAL:
            return _disabled(name)
        return r.fault(
            name,
            f"missing component {name!r} (gpuboot/components.yaml: not optional)",
            f"add {name}: with {'its' if name == 'kernel' else 'its version and its'} "
            "debian and redhat pins (gpuboot/stacks/README.md); only optional components "
            "may be left out: " + ", ".join(c for c in PARTS if c in _OPTIONAL),
        )
    return _read_driver(r, top[name]) if name == "driver" else _read_component(r, top[name], name)


def parse_stack(data: Any, path: Path, label: str) -> Stack:
    """Check a parsed stack document and build the Stack (StackFaults, a ConfigError
    naming every schema fault, if any)."""
    stack, faults = read_stack(data, path, label)
    if faults or stack is None:
        raise StackFaults(label, faults, stack)
    return stack


def read_stack_file(path: Path, label: str) -> Stack:
    try:
        data = read_capped_yaml(path, MAX_STACK_BYTES, "stack file", hint=STACK_FILE_HINT)
    except ConfigError as exc:
        raise StackFaults(label, [exc], None) from None
    return parse_stack(data, path, label)
