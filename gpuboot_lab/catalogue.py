"""The lab package catalogue (``packages.yaml``) as data: load, check and expand.

Every entry of the YAML expands to one :class:`PackageVersion` per (name, version),
with ``@var@`` templates filled in. Pure functions apart from reading the file; the
repository builder (:mod:`gpuboot_lab.repo`) turns them into ``.deb`` files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuboot.errors import ConfigError

CATALOGUE_PATH = Path(__file__).with_name("packages.yaml")

GPUEMU = "/opt/gpuemu/gpuemu"
MODULE_DIR = "/lib/modules/gpuemu"
USERSPACE_DIR = "/usr/lib/gpuemu/userspace"
UNIT_DIR = "/lib/systemd/system"
SCRIPT_NAMES = ("preinst", "postinst", "prerm", "postrm")
RELATION_KEYS = (
    "depends",
    "pre_depends",
    "recommends",
    "conflicts",
    "breaks",
    "replaces",
    "provides",
)
_PACKAGE_KEYS = {
    "name",
    "matrix",
    "versions",
    "section",
    "summary",
    "description",
    "modules",
    "module_version",
    "module_flavor",
    "module_license",
    "userspace",
    "tools",
    "units",
    "files",
    "links",
    "scripts",
    *RELATION_KEYS,
}
_MODULE_KEYS = {"name", "description", "depends", "flavor", "license", "version"}
_TEMPLATE = re.compile(r"@([a-z_][a-z0-9_]*)@")
_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
_VERSION = re.compile(r"^([0-9]+:)?[0-9][A-Za-z0-9.+~:-]*$")


@dataclass(frozen=True)
class FileEntry:
    """A regular file of a package: its text and octal mode."""

    content: str
    mode: int = 0o644


@dataclass(frozen=True)
class PackageVersion:
    """One buildable (package, version) with every template filled in."""

    name: str
    version: str
    section: str
    summary: str
    description: str
    relations: dict[str, list[str]]
    files: dict[str, FileEntry]
    links: dict[str, str]
    scripts: dict[str, str]
    modules: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def upstream(self) -> str:
        return upstream_version(self.version)

    @property
    def conffiles(self) -> list[str]:
        return sorted(p for p in self.files if p.startswith("/etc/"))

    def relation(self, key: str) -> str:
        """A control-file relation field (``Depends`` ...) as one string."""
        return ", ".join(self.relations.get(key, []))


@dataclass(frozen=True)
class Catalogue:
    """The whole catalogue: repository settings and every package version."""

    suite: str
    component: str
    architecture: str
    origin: str
    label: str
    maintainer: str
    script_prologue: str
    packages: list[PackageVersion]

    def versions_of(self, name: str) -> list[str]:
        return [p.version for p in self.packages if p.name == name]

    def get(self, name: str, version: str) -> PackageVersion:
        for pkg in self.packages:
            if pkg.name == name and pkg.version == version:
                return pkg
        raise KeyError(f"{name} {version}")


def upstream_version(version: str) -> str:
    """``1:4.2.3-1`` -> ``4.2.3``: drop the epoch and the Debian revision."""
    if ":" in version:
        version = version.split(":", 1)[1]
    if "-" in version:
        version = version.rsplit("-", 1)[0]
    return version


def _fill(text: str, variables: dict[str, str], where: str) -> str:
    def sub(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in variables:
            raise ConfigError(
                f"unknown template variable @{key}@",
                where=where,
                hint=f"define it in the matrix or version entry; known: {sorted(variables)}",
            )
        return variables[key]

    return _TEMPLATE.sub(sub, text)


def _str_list(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError("expected a list of strings", where=where)
    return list(value)


def _str_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigError("expected a mapping of strings to strings", where=where)
    return dict(value)


def _version_items(raw: Any, where: str) -> list[dict[str, str]]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError("expected a non-empty list of versions", where=where)
    items: list[dict[str, str]] = []
    for i, item in enumerate(raw):
        entry = {"version": item} if isinstance(item, str) else item
        if not isinstance(entry, dict) or not isinstance(entry.get("version"), str):
            raise ConfigError(
                "a version is a string or a mapping with 'version'", where=f"{where}[{i}]"
            )
        items.append({str(k): str(v) for k, v in entry.items()})
    return items


def _expand_entry(entry: Any, index: int) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """(entry, variables) for every version the entry describes."""
    where = f"packages[{index}]"
    if not isinstance(entry, dict):
        raise ConfigError("a package entry must be a mapping", where=where)
    unknown = set(entry) - _PACKAGE_KEYS
    if unknown:
        raise ConfigError(
            f"unknown keys {sorted(unknown)}", where=where, hint=f"allowed: {sorted(_PACKAGE_KEYS)}"
        )
    for key in ("name", "summary"):
        if not isinstance(entry.get(key), str):
            raise ConfigError(f"'{key}' is required", where=where)
    if ("matrix" in entry) == ("versions" in entry):
        raise ConfigError("give exactly one of 'matrix' or 'versions'", where=where)
    rows = entry["matrix"] if "matrix" in entry else [{"versions": entry["versions"]}]
    if not isinstance(rows, list) or not rows:
        raise ConfigError("'matrix' must be a non-empty list", where=f"{where}.matrix")
    out: list[tuple[dict[str, Any], dict[str, str]]] = []
    for r, row in enumerate(rows):
        if not isinstance(row, dict) or "versions" not in row:
            raise ConfigError("a matrix row needs 'versions'", where=f"{where}.matrix[{r}]")
        row_vars = {str(k): str(v) for k, v in row.items() if k != "versions"}
        for item in _version_items(row["versions"], f"{where}.matrix[{r}].versions"):
            variables = {**row_vars, **item}
            version = variables["version"]
            if not _VERSION.match(version):
                raise ConfigError(f"bad Debian version {version!r}", where=where)
            variables["upstream"] = upstream_version(version)
            out.append((entry, variables))
    return out


def _build(entry: dict[str, Any], variables: dict[str, str], where: str) -> PackageVersion:
    name = _fill(entry["name"], variables, f"{where}.name")
    if not _NAME.match(name):
        raise ConfigError(f"bad package name {name!r}", where=where)
    variables = {**variables, "name": name}
    where = f"{where} ({name} {variables['version']})"

    def fill(text: str, key: str) -> str:
        return _fill(text, variables, f"{where}.{key}")

    relations = {
        key: [fill(v, key) for v in _str_list(entry.get(key), f"{where}.{key}")]
        for key in RELATION_KEYS
        if entry.get(key)
    }
    files: dict[str, FileEntry] = {}
    links: dict[str, str] = {}
    modules: dict[str, dict[str, str]] = {}

    def add_file(path: str, content: str, mode: int = 0o644) -> None:
        if not path.startswith("/") or path in files or path in links:
            raise ConfigError(f"bad or duplicate path {path!r}", where=where)
        files[path] = FileEntry(content, mode)

    raw_modules = entry.get("modules") or []
    if not isinstance(raw_modules, list):
        raise ConfigError("'modules' must be a list", where=f"{where}.modules")
    for mod in raw_modules:
        if not isinstance(mod, dict) or not isinstance(mod.get("name"), str):
            raise ConfigError("a module needs a 'name'", where=f"{where}.modules")
        if set(mod) - _MODULE_KEYS:
            raise ConfigError(
                f"unknown module keys {sorted(set(mod) - _MODULE_KEYS)}", where=f"{where}.modules"
            )
        desc: dict[str, str] = {
            "version": fill(
                str(mod.get("version", entry.get("module_version", "@upstream@"))), "modules"
            ),
            "description": fill(str(mod.get("description", mod["name"])), "modules"),
        }
        deps = _str_list(mod.get("depends"), f"{where}.modules")
        if deps:
            desc["depends"] = ",".join(deps)
        flavor = mod.get("flavor", entry.get("module_flavor"))
        if flavor:
            if flavor not in ("open", "proprietary"):
                raise ConfigError(f"bad flavor {flavor!r}", where=f"{where}.modules")
            desc["flavor"] = str(flavor)
        lic = mod.get("license", entry.get("module_license"))
        if lic:
            desc["license"] = str(lic)
        desc["package"] = name
        modules[mod["name"]] = desc
        body = "".join(f"{k}={v}\n" for k, v in desc.items())
        add_file(f"{MODULE_DIR}/{mod['name']}.ko", body)

    for comp, ver in _str_map(entry.get("userspace"), f"{where}.userspace").items():
        add_file(
            f"{USERSPACE_DIR}/{fill(comp, 'userspace')}.version", fill(ver, "userspace") + "\n"
        )
    for unit, text in _str_map(entry.get("units"), f"{where}.units").items():
        add_file(f"{UNIT_DIR}/{unit}", fill(text, "units"))
    raw_files = entry.get("files") or []
    if not isinstance(raw_files, list):
        raise ConfigError("'files' must be a list", where=f"{where}.files")
    for f in raw_files:
        if not isinstance(f, dict) or not isinstance(f.get("path"), str):
            raise ConfigError("a file needs 'path' and 'content'", where=f"{where}.files")
        add_file(
            fill(f["path"], "files"),
            fill(str(f.get("content", "")), "files"),
            int(str(f.get("mode", "0644")), 8),
        )
    for tool in _str_list(entry.get("tools"), f"{where}.tools"):
        links[fill(tool, "tools")] = GPUEMU
    for path, target in _str_map(entry.get("links"), f"{where}.links").items():
        links[fill(path, "links")] = fill(target, "links")
    for path in links:
        if not path.startswith("/") or path in files:
            raise ConfigError(f"bad or duplicate link {path!r}", where=where)

    scripts = _str_map(entry.get("scripts"), f"{where}.scripts")
    if set(scripts) - set(SCRIPT_NAMES):
        raise ConfigError(
            f"unknown scripts {sorted(set(scripts) - set(SCRIPT_NAMES))}", where=f"{where}.scripts"
        )
    summary = fill(entry["summary"], "summary")
    description = fill(str(entry.get("description", "")), "description").strip()
    return PackageVersion(
        name=name,
        version=variables["version"],
        section=str(entry.get("section", "misc")),
        summary=summary,
        description=description,
        relations=relations,
        files=files,
        links=links,
        scripts={k: fill(v, "scripts") for k, v in scripts.items()},
        modules=modules,
    )


def parse_catalogue(text: str, where: str = "packages.yaml") -> Catalogue:
    """Check and expand catalogue YAML text."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}", where=where) from exc
    if not isinstance(data, dict) or data.get("schema") != 1:
        raise ConfigError("expected a mapping with 'schema: 1'", where=where)
    for key in ("suite", "component", "architecture", "maintainer", "script_prologue"):
        if not isinstance(data.get(key), str):
            raise ConfigError(f"'{key}' is required", where=where)
    if not data["script_prologue"].startswith("#!/bin/sh\nset -e\n"):
        raise ConfigError(
            "script_prologue must start with '#!/bin/sh' and 'set -e'",
            where=f"{where}.script_prologue",
        )
    entries = data.get("packages")
    if not isinstance(entries, list) or not entries:
        raise ConfigError("'packages' must be a non-empty list", where=where)
    packages: list[PackageVersion] = []
    seen: set[tuple[str, str]] = set()
    for i, entry in enumerate(entries):
        for raw, variables in _expand_entry(entry, i):
            pkg = _build(raw, variables, f"{where}: packages[{i}]")
            key = (pkg.name, pkg.version)
            if key in seen:
                raise ConfigError(f"{pkg.name} {pkg.version} is listed twice", where=where)
            seen.add(key)
            packages.append(pkg)
    return Catalogue(
        suite=data["suite"],
        component=data["component"],
        architecture=data["architecture"],
        origin=str(data.get("origin", data["suite"])),
        label=str(data.get("label", data["suite"])),
        maintainer=data["maintainer"],
        script_prologue=data["script_prologue"],
        packages=packages,
    )


def load_catalogue(path: Path = CATALOGUE_PATH) -> Catalogue:
    """Read and expand ``packages.yaml`` (or another catalogue file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read catalogue: {exc}", where=str(path)) from exc
    return parse_catalogue(text, where=str(path))
