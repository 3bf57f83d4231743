"""The lab package catalogue (``packages.yaml``) as data: load, check and expand.

Every entry of the YAML expands to one :class:`PackageVersion` per (name, version) and
OS family, with ``@var@`` templates filled in: the Debian package, and the RPM under the
name, version and relations its ``redhat:`` mapping gives (same files, modules, units
and maintainer-script bodies). Pure functions apart from reading the file; the
repository builders (:mod:`gpuboot_lab.repo`, :mod:`gpuboot_lab.rpmrepo`) turn them into
``.deb`` and ``.rpm`` files.
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
RPM_RELATION_KEYS = ("requires", "provides", "conflicts", "obsoletes")
FAMILIES = ("debian", "redhat")
# Debian relation operators in rpm's spelling.
_RPM_OPS = {"=": "=", ">=": ">=", "<=": "<=", ">>": ">", "<<": "<"}
_REDHAT_KEYS = {"name", "version", "summary", "streams", "profiles", *RPM_RELATION_KEYS}
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
    "debian",
    "redhat",
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
    family: str = "debian"
    # redhat only: the nvidia-driver module streams listing this rpm, and the profiles
    # of those streams that name it.
    streams: tuple[str, ...] = ()
    profiles: tuple[str, ...] = ()

    @property
    def upstream(self) -> str:
        return upstream_version(self.version)

    @property
    def conffiles(self) -> list[str]:
        return sorted(p for p in self.files if p.startswith("/etc/"))

    @property
    def evr(self) -> tuple[str, str, str]:
        """rpm's (epoch, version, release): ``3:550.54.15-1.el9`` -> ('3', '550.54.15', '1.el9')."""
        epoch, _, rest = self.version.rpartition(":")
        version, _, release = rest.partition("-")
        return epoch or "0", version, release or "1"

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
    script_prologue: str  # the Debian maintainer scripts' (common part + debian helpers)
    packages: list[PackageVersion]
    rpm_script_prologue: str = ""  # the rpm scriptlets' (common part + redhat helpers)
    rpms: list[PackageVersion] = field(default_factory=list)

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


def _rpm_relation(rel: str) -> str:
    """``foo (>= 1.2-1)`` -> ``foo >= 1.2-1``; alternatives (``a | b``) have no rpm form here."""
    name, _, rest = rel.partition("(")
    if "|" in rel:
        raise ConfigError(f"no rpm form for the alternative {rel!r}: give redhat relations")
    if not rest:
        return name.strip()
    op, _, version = rest.rstrip(")").strip().partition(" ")
    return f"{name.strip()} {_RPM_OPS[op]} {version.strip()}"


def _redhat_view(
    entry: dict[str, Any], variables: dict[str, str], where: str
) -> tuple[dict[str, Any], dict[str, str]] | None:
    """The entry and variables as the rpm sees them, or None (``redhat: false``).

    Without ``redhat:`` the rpm has the deb's name and version and its relations in rpm
    spelling; a ``redhat:`` mapping may rename, re-version (templates see the deb's
    variables) and, naming any relation, gives them all.
    """
    rh = entry.get("redhat", {})
    if rh is False:
        return None
    if not isinstance(rh, dict) or set(rh) - _REDHAT_KEYS:
        raise ConfigError(
            "'redhat' is false or a mapping",
            where=f"{where}.redhat",
            hint=str(sorted(_REDHAT_KEYS)),
        )
    version = _fill(str(rh.get("version", "@version@")), variables, f"{where}.redhat.version")
    if not _VERSION.match(version):
        raise ConfigError(f"bad rpm version {version!r}", where=f"{where}.redhat.version")
    out = {k: v for k, v in entry.items() if k not in RELATION_KEYS}
    out["name"] = rh.get("name", entry["name"])
    out["summary"] = rh.get("summary", entry["summary"])
    if any(k in rh for k in RPM_RELATION_KEYS):
        for key in RPM_RELATION_KEYS:
            out[key] = rh.get(key) or []
    else:
        try:
            out["requires"] = [
                _rpm_relation(r) for k in ("pre_depends", "depends") for r in entry.get(k) or []
            ]
            out["conflicts"] = [
                _rpm_relation(r) for k in ("conflicts", "breaks") for r in entry.get(k) or []
            ]
            out["provides"] = [_rpm_relation(r) for r in entry.get("provides") or []]
        except (ConfigError, KeyError) as exc:
            raise ConfigError(f"{exc}", where=f"{where}.redhat") from exc
    out["streams"] = _str_list(rh.get("streams"), f"{where}.redhat.streams")
    out["profiles"] = _str_list(rh.get("profiles"), f"{where}.redhat.profiles")
    return out, {**variables, "version": version, "upstream": upstream_version(version)}


def _build(
    entry: dict[str, Any], variables: dict[str, str], where: str, family: str = "debian"
) -> PackageVersion:
    relation_keys = RELATION_KEYS if family == "debian" else RPM_RELATION_KEYS
    name = _fill(entry["name"], variables, f"{where}.name")
    if not _NAME.match(name):
        raise ConfigError(f"bad package name {name!r}", where=where)
    variables = {**variables, "name": name}
    where = f"{where} ({name} {variables['version']})"

    def fill(text: str, key: str) -> str:
        return _fill(text, variables, f"{where}.{key}")

    relations = {
        key: [fill(v, key) for v in _str_list(entry.get(key), f"{where}.{key}")]
        for key in relation_keys
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
        family=family,
        streams=tuple(fill(v, "streams") for v in entry.get("streams", ())),
        profiles=tuple(entry.get("profiles", ())),
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
    helpers = data.get("script_helpers", {})
    if not isinstance(helpers, dict) or set(helpers) - set(FAMILIES):
        raise ConfigError(
            "'script_helpers' maps an OS family to shell text",
            where=f"{where}.script_helpers",
            hint=f"families: {', '.join(FAMILIES)}",
        )
    prologue = {
        fam: data["script_prologue"].rstrip("\n") + "\n" + str(helpers.get(fam, ""))
        for fam in FAMILIES
    }
    entries = data.get("packages")
    if not isinstance(entries, list) or not entries:
        raise ConfigError("'packages' must be a non-empty list", where=where)
    packages: list[PackageVersion] = []
    rpms: list[PackageVersion] = []
    seen: set[tuple[str, str, str]] = set()
    for i, entry in enumerate(entries):
        for raw, variables in _expand_entry(entry, i):
            at = f"{where}: packages[{i}]"
            built = [] if raw.get("debian") is False else [_build(raw, variables, at)]
            view = _redhat_view(raw, variables, at)
            if view:
                built.append(_build(*view, at, family="redhat"))
            for pkg in built:
                key = (pkg.family, pkg.name, pkg.version)
                if key in seen:
                    raise ConfigError(
                        f"{pkg.family} {pkg.name} {pkg.version} is listed twice", where=where
                    )
                seen.add(key)
                (packages if pkg.family == "debian" else rpms).append(pkg)
    return Catalogue(
        suite=data["suite"],
        component=data["component"],
        architecture=data["architecture"],
        origin=str(data.get("origin", data["suite"])),
        label=str(data.get("label", data["suite"])),
        maintainer=data["maintainer"],
        script_prologue=prologue["debian"],
        packages=packages,
        rpm_script_prologue=prologue["redhat"],
        rpms=rpms,
    )


def load_catalogue(path: Path = CATALOGUE_PATH) -> Catalogue:
    """Read and expand ``packages.yaml`` (or another catalogue file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read catalogue: {exc}", where=str(path)) from exc
    return parse_catalogue(text, where=str(path))
