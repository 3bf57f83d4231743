"""The component table (gpuboot/components.yaml) as frozen data, checked on load.

Each component of the GPU software stack and each role that delivers one is named once
there; the stack model (a table keyed by component), the upgrade plan, role_vars and
table_vars (the roles' pins, supersede patterns, modules and units), the stack rules' pin
lists and required modules, the bundle's allow-list and the molecule matrix derive their
lists from it. Every fault in the file is a ConfigError naming the file and the key. It
imports nothing of the rules: gpuboot.checks.rules.check_table_rules checks that the
roles' rules exist.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from gpuboot import paths
from gpuboot.errors import ConfigError
from gpuboot.yamlsafe import safe_load

TABLE = Path(__file__).resolve().parent / "components.yaml"
OS_FAMILIES = ("debian", "redhat")  # as gpuboot.stacks.model (which imports this module)

_COMPONENT_KEYS = {
    "role",
    "prefix",
    "pinned",
    "generic_vars",
    "optional",
    "reboot",
    "restarts",
    "families",
    "supersede",
    "switch",
    "modules",
    "hardware",
    "services",
}
_ROLE_KEYS = {"needs", "rules", "whole_stack", "undo"}
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Component:
    name: str  # the stack file's key
    role: str
    prefix: str  # role variables: <prefix>_package, _version, _packages, _enabled
    pinned: bool  # the stack pins its packages (False: a switch only)
    generic_vars: bool  # role_vars writes the <prefix>_* package variables for it
    optional: bool
    reboot: bool
    restarts: tuple[str, ...]
    families: dict[str, tuple[tuple[str, str], ...]]  # os family -> (pattern, slot)
    supersede: bool  # the role removes installed rivals its families match
    switch: str | None  # the role variable that turns its pins off (None: none does)
    modules: tuple[str, ...]  # kernel modules it loads (MOD-001)
    hardware: str | None  # its modules only on a SKU with this hardware
    services: tuple[str, ...]  # systemd units it runs

    def supersede_patterns(self, os_family: str) -> list[str]:
        """The patterns of installed packages its role removes first on such a node."""
        if not self.supersede:
            return []
        return [pattern for pattern, _ in self.families.get(os_family, ())]


@dataclass(frozen=True)
class Undo:
    command: str
    fails: str  # the rule that must fail once ``command`` ran


@dataclass(frozen=True)
class Role:
    name: str
    needs: tuple[str, ...]  # prerequisite roles, in install order
    rules: tuple[str, ...]  # the certify rules that judge it
    whole_stack: bool
    undo: dict[str, Undo]  # OS family -> its own undo (a hold is apt-mark's or versionlock's)


@dataclass(frozen=True)
class Table:
    components: tuple[Component, ...]  # in the stack's install order
    roles: tuple[Role, ...]  # in install order
    label: str = TABLE.name  # how messages name the file

    def role(self, name: str) -> Role:
        return next(r for r in self.roles if r.name == name)

    def prefixes(self, role: str) -> tuple[str, ...]:
        """The variable prefixes of what ``role`` installs."""
        return tuple(c.prefix for c in self.components if c.role == role)

    def part_prefixes(self) -> dict[str, tuple[str, ...]]:
        """Role -> the variable prefixes of the part of the stack it installs. Roles that
        guard the whole stack (whole_stack) are left out: their node carries every pin."""
        whole = {r.name for r in self.roles if r.whole_stack}
        out: dict[str, tuple[str, ...]] = {}
        for c in self.components:
            if c.role not in whole:
                out[c.role] = (*out.get(c.role, ()), c.prefix)
        return out


class _Reader:
    def __init__(self, label: str):
        self.label = label

    def error(self, key: str, message: str, hint: str) -> ConfigError:
        return ConfigError(message, where=f"{self.label}: {key}", hint=hint)

    def mapping(self, value: Any, key: str, allowed: set[str] | None = None) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.error(key, "must be a mapping", f"write {key} as `key: value` lines")
        for k in value:
            if allowed is not None and k not in allowed:
                raise self.error(
                    f"{key}.{k}",
                    f"unknown key {k!r}",
                    "remove it or fix its spelling; keys allowed here: "
                    + ", ".join(sorted(allowed)),
                )
        return value

    def name(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
            raise self.error(key, f"malformed name {value!r}", "write a lower_snake_case name")
        return value

    def boolean(self, data: dict[str, Any], key: str, field: str, default: bool) -> bool:
        value = data.get(field, default)
        if not isinstance(value, bool):
            raise self.error(
                f"{key}.{field}", f"must be true or false, got {value!r}", "write true or false"
            )
        return value

    def strings(self, value: Any, key: str) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.error(key, "must be a list of strings", f"write {key} as [a, b]")
        return tuple(value)

    def role_dir(self, value: Any, key: str, roles_dir: Path) -> str:
        name = self.name(value, key)
        if not (roles_dir / name).is_dir():
            raise self.error(
                key,
                f"{name!r} is not a role",
                f"name a role under {roles_dir} (the roles gpuboot install runs)",
            )
        return name


def _families(r: _Reader, value: Any, key: str) -> dict[str, tuple[tuple[str, str], ...]]:
    out = {}
    for family, slots in r.mapping(value, key, set(OS_FAMILIES)).items():
        pairs = []
        for pattern, slot in r.mapping(slots, f"{key}.{family}").items():
            try:
                re.compile(pattern)
            except re.error as exc:
                raise r.error(
                    f"{key}.{family}", f"bad pattern {pattern!r}: {exc}", "fix the regex"
                ) from exc
            if not isinstance(slot, str):
                raise r.error(
                    f"{key}.{family}", f"slot of {pattern!r} must be a string", "quote it"
                )
            pairs.append((pattern, slot))
        out[family] = tuple(pairs)
    return out


def _switch(r: _Reader, data: dict[str, Any], key: str) -> str | None:
    value = data.get("switch", f"{data['prefix']}_enabled")
    return None if value is None else r.name(value, f"{key}.switch")


def _component(r: _Reader, name: str, raw: Any, roles_dir: Path) -> Component:
    key = f"components.{name}"
    data = r.mapping(raw, key, _COMPONENT_KEYS)
    for field in ("role", "prefix", "pinned"):
        if field not in data:
            raise r.error(f"{key}.{field}", f"missing key {field!r}", f"add {key}.{field}")
    pinned = r.boolean(data, key, "pinned", True)
    return Component(
        name=r.name(name, key),
        role=r.role_dir(data["role"], f"{key}.role", roles_dir),
        prefix=r.name(data["prefix"], f"{key}.prefix"),
        pinned=pinned,
        generic_vars=r.boolean(data, key, "generic_vars", pinned),
        optional=r.boolean(data, key, "optional", False),
        reboot=r.boolean(data, key, "reboot", False),
        restarts=r.strings(data.get("restarts", []), f"{key}.restarts"),
        families=_families(r, data.get("families", {}), f"{key}.families"),
        supersede=r.boolean(data, key, "supersede", True),
        switch=_switch(r, data, key),
        modules=r.strings(data.get("modules", []), f"{key}.modules"),
        hardware=r.name(data["hardware"], f"{key}.hardware") if "hardware" in data else None,
        services=r.strings(data.get("services", []), f"{key}.services"),
    )


def _role(r: _Reader, name: str, raw: Any, roles_dir: Path) -> Role:
    key = f"roles.{name}"
    data = r.mapping(raw, key, _ROLE_KEYS)
    for field in ("needs", "rules", "undo"):
        if field not in data:
            raise r.error(f"{key}.{field}", f"missing key {field!r}", f"add {key}.{field}")
    needs = tuple(
        r.role_dir(n, f"{key}.needs[{i}]", roles_dir)
        for i, n in enumerate(r.strings(data["needs"], f"{key}.needs"))
    )
    # that each names a certify rule is checked where the rules are
    # (gpuboot.checks.rules.check_table_rules): the table stands below the rules
    rules = r.strings(data["rules"], f"{key}.rules")
    return Role(
        name=r.role_dir(name, key, roles_dir),
        needs=needs,
        rules=rules,
        whole_stack=r.boolean(data, key, "whole_stack", False),
        undo=_undo(r, data["undo"], key, rules),
    )


def _undo(r: _Reader, value: Any, role_key: str, rules: tuple[str, ...]) -> dict[str, Undo]:
    """Every OS family's undo: the molecule matrix runs each role on both families."""
    key = f"{role_key}.undo"
    families = r.mapping(value, key, set(OS_FAMILIES))
    out = {}
    for family in OS_FAMILIES:
        where = f"{key}.{family}"
        if family not in families:
            raise r.error(
                where,
                f"no undo for {family} nodes",
                f"add {where}: {{command: ..., fails: ...}} (the role runs on both families)",
            )
        undo = r.mapping(families[family], where, {"command", "fails"})
        fails = undo.get("fails")
        if fails not in rules:
            raise r.error(
                f"{where}.fails", f"{fails} does not judge this role", f"add it to {role_key}.rules"
            )
        if not isinstance(undo.get("command"), str) or not undo["command"].strip():
            raise r.error(
                f"{where}.command", "must be a shell command", "write the command as a string"
            )
        out[family] = Undo(command=undo["command"], fails=fails)
    return out


def _read(path: Path) -> dict[str, Any]:
    label = path.name
    try:
        data = safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read the component table: {exc.strerror}", where=label) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"not valid YAML: {exc}", where=label, hint="fix the YAML syntax"
        ) from exc
    return _Reader(label).mapping(data, "top level", {"components", "roles"})


@cache
def components(path: Path = TABLE, roles_dir: Path = paths.ROLES_DIR) -> tuple[Component, ...]:
    """The table's components, checked (what the stack model needs, without the rules)."""
    r = _Reader(path.name)
    raw = r.mapping(_read(path).get("components"), "components")
    out = tuple(_component(r, name, value, roles_dir) for name, value in raw.items())
    for field in ("name", "prefix"):
        seen = [getattr(c, field) for c in out]
        dup = next((v for v in seen if seen.count(v) > 1), None)
        if dup is not None:
            raise r.error(f"components.{dup}", f"{field} {dup!r} twice", f"name each {field} once")
    return out


@cache
def load(path: Path = TABLE, roles_dir: Path = paths.ROLES_DIR) -> Table:
    """The whole table, checked (ConfigError on the first fault); that its roles name
    certify rules is gpuboot.checks.rules.check_table_rules' to say."""
    r = _Reader(path.name)
    raw = r.mapping(_read(path).get("roles"), "roles")
    roles = tuple(_role(r, name, value, roles_dir) for name, value in raw.items())
    parts = components(path, roles_dir)
    for c in parts:
        if c.role not in raw:
            raise r.error(
                f"components.{c.name}.role",
                f"role {c.role!r} has no entry under roles",
                f"add roles.{c.role} (its prerequisites, rules and undo: the molecule matrix)",
            )
    return Table(components=parts, roles=roles, label=path.name)
