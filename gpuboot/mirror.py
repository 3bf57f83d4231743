"""`gpuboot mirror --repo`: the dependency closure an offline mirror must hold, computed
from the mirror's own apt metadata (its ``Packages`` index), not from a guess.

Every package the stack pins (and the site's probe-tools package) is looked up at its
exact version; then each ``Depends`` and ``Pre-Depends`` is resolved as apt would:
an alternative (``a | b``) already in the closure wins, else the first one the index can
satisfy; a versioned constraint (``<<``, ``<=``, ``=``, ``>=``, ``>>``) picks the
highest version that meets it; a name no package carries is a virtual package, met by
a ``Provides`` (versioned provides for versioned constraints). What the index cannot
satisfy is listed with the package that needs it. Recommends and Suggests are left out.
A dnf repository reads the same way from its repodata's primary.xml: each Requires is a
group of one, Provides and the files primary lists meet them (``/bin/sh``), versions in
rpm's order; rpmlib() requirements are rpm's own; rich (boolean) dependencies are not
evaluated and show as unsatisfied.
"""

from __future__ import annotations

import bz2
import functools
import gzip
import io
import json
import lzma
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuboot.errors import BadInput
from gpuboot.stacks.versions import compare_versions, dpkg_compare
from gpuboot.yamlsafe import read_capped_bytes

Compare = Callable[[str, str], int]

# An index bigger than this is not a Packages file (Debian's whole main is ~50 MB).
MAX_INDEX_BYTES = 512 * 1024 * 1024
FETCH_TIMEOUT_S = 60
_INDEX_NAMES = ("Packages", "Packages.gz", "Packages.xz", "Packages.bz2")
_OPS = ("<<", "<=", ">=", ">>", "=", "<", ">")  # two-character ones first
_REPO_HINT = (
    "give an apt Packages index (Packages, .gz, .xz, .bz2) or a dnf repository (its root "
    "with repodata/, or primary.xml[.gz]), as a path, directory or http(s):// URL, "
    "e.g. --repo https://mirror/cuda/ubuntu2204/x86_64/"
)


@dataclass(frozen=True)
class Rel:
    """One alternative of a relation: ``name (op version)``."""

    name: str
    op: str | None = None
    version: str | None = None

    def __str__(self) -> str:
        return f"{self.name} ({self.op} {self.version})" if self.op else self.name

    def allows(self, version: str | None, compare: Compare = dpkg_compare) -> bool:
        if self.op is None:
            return True
        if version is None:  # an unversioned Provides meets no versioned constraint
            return False
        order = compare(version, str(self.version))
        op = {"<": "<=", ">": ">="}.get(self.op, self.op)  # obsolete spellings
        return {
            "<<": order < 0,
            "<=": order <= 0,
            "=": order == 0,
            ">=": order >= 0,
            ">>": order > 0,
        }[op]


@dataclass(frozen=True)
class Entry:
    name: str
    version: str
    arch: str
    depends: tuple[tuple[Rel, ...], ...]  # Pre-Depends and Depends: groups of alternatives
    provides: tuple[Rel, ...]  # op "=" when versioned
    repository: str

    def pin(self) -> str:
        return f"{self.name}={self.version}"


def _rel(text: str, where: str) -> Rel:
    text = text.strip()
    name, _, rest = text.partition("(")
    name = name.strip().split(":", 1)[0]  # multi-arch qualifiers (:any, :native)
    name = name.split("[", 1)[0].strip()  # architecture restrictions (source stanzas)
    if not name:
        raise BadInput(f"malformed relation {text!r}", where=where, hint=_REPO_HINT)
    if not rest:
        return Rel(name)
    constraint = rest.rstrip(") \t")
    for op in _OPS:
        if constraint.startswith(op):
            version = constraint[len(op) :].strip()
            if version:
                return Rel(name, op, version)
    raise BadInput(f"malformed version constraint in {text!r}", where=where, hint=_REPO_HINT)


def parse_relations(text: str, where: str = "Depends") -> tuple[tuple[Rel, ...], ...]:
    """``a (>= 1) | b, c`` -> ((a>=1, b), (c,))."""
    groups = []
    for group in text.split(","):
        if group.strip():
            groups.append(tuple(_rel(alt, where) for alt in group.split("|")))
    return tuple(groups)


def _paragraphs(text: str):
    """Each deb822 paragraph as field -> value, a field's continuation lines joined by
    spaces. A field's parts are gathered in a list and joined once: a Depends continued
    over 100,000 lines is read in linear time, not copied on every line."""
    fields: dict[str, list[str]] = {}
    key = None
    for line in text.splitlines():
        if not line.strip():
            if fields:
                yield _joined(fields)
            fields, key = {}, None
        elif line[0] in " \t":
            if key is not None:  # a continuation line
                fields[key].append(line.strip())
        else:
            key, _, value = line.partition(":")
            key = key.strip().lower()
            fields[key] = [value.strip()]
    if fields:
        yield _joined(fields)


def _joined(fields: dict[str, list[str]]) -> dict[str, str]:
    return {key: " ".join(parts) for key, parts in fields.items()}


def parse_packages(text: str, repository: str) -> list[Entry]:
    """The entries of an apt ``Packages`` index (deb822 paragraphs)."""
    entries = []
    for n, fields in enumerate(_paragraphs(text), 1):
        if "package" not in fields or "version" not in fields:
            raise BadInput(
                f"paragraph {n} has no Package or Version field: not a Packages index",
                where=repository,
                hint=_REPO_HINT,
            )
        where = f"{repository}: {fields['package']}"
        depends = parse_relations(fields.get("pre-depends", ""), where) + parse_relations(
            fields.get("depends", ""), where
        )
        provides = tuple(
            alt for group in parse_relations(fields.get("provides", ""), where) for alt in group
        )
        entries.append(
            Entry(
                name=fields["package"],
                version=fields["version"],
                arch=fields.get("architecture", "all"),
                depends=depends,
                provides=provides,
                repository=repository,
            )
        )
    return entries


def _decompress(data: bytes, where: str) -> bytes:
    """``data``, expanded if compressed: chunk by chunk, stopped once past MAX_INDEX_BYTES
    (a 156 KB .xz of zeros expands to 2 GB; it is refused, not expanded)."""
    opener = next((o for magic, o in _COMPRESSED if data.startswith(magic)), None)
    if opener is not None:
        try:
            with opener(io.BytesIO(data)) as stream:
                data = stream.read(MAX_INDEX_BYTES + 1)
        except (OSError, EOFError, lzma.LZMAError) as exc:
            raise BadInput(
                f"cannot decompress the index: {exc}", where=where, hint=_REPO_HINT
            ) from exc
    if len(data) > MAX_INDEX_BYTES:
        raise BadInput(
            f"the index expands past {MAX_INDEX_BYTES} bytes: too large to be a Packages file "
            "or repodata",
            where=where,
            hint=_REPO_HINT,
        )
    return data


# magic -> a reader of that format whose read(n) expands no more than it returns
_COMPRESSED = (
    (b"\x1f\x8b", lambda f: gzip.GzipFile(fileobj=f)),
    (b"\xfd7zXZ\x00", lzma.LZMAFile),
    (b"BZh", bz2.BZ2File),
)


def _fetch(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as resp:  # the operator's URL
            data = resp.read(MAX_INDEX_BYTES + 1)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise BadInput(f"cannot fetch the index: {exc}", where=url, hint=_REPO_HINT) from exc
    return data


def _read(ref: str) -> bytes:
    """One file, by path or URL, decompressed. A path names a regular file (a FIFO or a
    device would hang the read or never end it)."""
    if "://" in ref:
        return _decompress(_fetch(ref), ref)
    path = Path(ref).expanduser()
    data = read_capped_bytes(path, MAX_INDEX_BYTES, "repository index", hint=_REPO_HINT)
    return _decompress(data, ref)


def _first(refs: list[str], where: str) -> tuple[str, bytes]:
    errors = []
    for ref in refs:
        try:
            return ref, _read(ref)
        except BadInput as exc:
            errors.append(exc.message)
    raise BadInput(
        f"no Packages index or repodata here ({'; '.join(errors)})", where=where, hint=_REPO_HINT
    )


def _primary_href(repomd: bytes, where: str) -> str:
    try:
        root = ET.fromstring(repomd)
    except ET.ParseError as exc:
        raise BadInput(f"repomd.xml does not parse: {exc}", where=where, hint=_REPO_HINT) from exc
    for data in root.iter(f"{{{_REPO_NS}}}data"):
        location = data.find(f"{{{_REPO_NS}}}location")
        if data.get("type") == "primary" and location is not None:
            href = str(location.get("href"))
            if href.startswith("/") or "://" in href or ".." in href.split("/"):
                raise BadInput(
                    f"repomd.xml's primary is {href!r}, outside the repository",
                    where=where,
                    hint=_REPO_HINT,
                )
            return href
    raise BadInput("repomd.xml names no primary metadata", where=where, hint=_REPO_HINT)


def read_entries(source: str) -> list[Entry]:
    """The packages ``source`` names: an apt Packages index or a dnf repository's
    repodata (repomd.xml, or primary.xml itself), as a file, a directory or a URL."""
    remote = "://" in source
    if remote and source.endswith("/"):
        refs = [source + "repodata/repomd.xml"] + [source + n for n in _INDEX_NAMES[1:]]
        refs.append(source + "Packages")
        ref, data = _first(refs, source)
    elif not remote and Path(source).expanduser().is_dir():
        base = Path(source).expanduser()
        names = ["repodata/repomd.xml", *_INDEX_NAMES]
        found = [str(base / n) for n in names if (base / n).is_file()]
        if not found:
            raise BadInput(
                f"no repodata/repomd.xml or {' / '.join(_INDEX_NAMES)} in this directory",
                where=source,
                hint=_REPO_HINT,
            )
        ref, data = found[0], _read(found[0])
    else:
        ref, data = source, _read(source)
    head = data[:4096].lstrip()
    if head.startswith(b"<"):
        if b"<repomd" in head:  # the repository's root: primary.xml is where it says
            top = ref.rsplit("/", 2)[0]  # <root>/repodata/repomd.xml -> <root>
            data = _read(f"{top}/{_primary_href(data, ref)}")
        return parse_primary(data, source)
    return parse_packages(data.decode("utf-8", errors="replace"), source)


# ---------------------------------------------------------------- dnf repodata
_COMMON_NS = "http://linux.duke.edu/metadata/common"
_RPM_NS = "http://linux.duke.edu/metadata/rpm"
_REPO_NS = "http://linux.duke.edu/metadata/repo"
_RPM_FLAGS = {"EQ": "=", "LT": "<<", "LE": "<=", "GT": ">>", "GE": ">="}


def _evr(node: ET.Element) -> str | None:
    ver = node.get("ver")
    if ver is None:
        return None
    epoch, rel = node.get("epoch") or "0", node.get("rel")
    return ("" if epoch == "0" else f"{epoch}:") + ver + (f"-{rel}" if rel else "")


def _rpm_rel(node: ET.Element) -> Rel:
    flags, evr = node.get("flags"), _evr(node)
    op = _RPM_FLAGS.get(flags or "")
    return Rel(str(node.get("name")), op, evr) if op and evr else Rel(str(node.get("name")))


def parse_primary(data: bytes, repository: str) -> list[Entry]:
    """The entries of a dnf repository's primary.xml: Requires as single-alternative
    groups (rpmlib() ones are rpm's own), Provides plus the files primary lists."""
    c, r = f"{{{_COMMON_NS}}}", f"{{{_RPM_NS}}}"
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise BadInput(
            f"primary.xml does not parse: {exc}", where=repository, hint=_REPO_HINT
        ) from exc
    entries = []
    for pkg in root.iter(f"{c}package"):
        name, arch, version = pkg.find(f"{c}name"), pkg.find(f"{c}arch"), pkg.find(f"{c}version")
        if name is None or version is None or _evr(version) is None:
            raise BadInput("a package without name or version", where=repository, hint=_REPO_HINT)
        fmt = pkg.find(f"{c}format")
        provides: list[Rel] = []
        requires: list[tuple[Rel, ...]] = []
        if fmt is not None:
            provides = [_rpm_rel(e) for e in fmt.iterfind(f"{r}provides/{r}entry")]
            provides += [Rel(str(f.text)) for f in fmt.iterfind(f"{c}file") if f.text]
            for e in fmt.iterfind(f"{r}requires/{r}entry"):
                rel = _rpm_rel(e)
                if not rel.name.startswith("rpmlib(") and (rel,) not in requires:
                    requires.append((rel,))
        entries.append(
            Entry(
                name=str(name.text),
                version=str(_evr(version)),
                arch=str(arch.text if arch is not None else "noarch"),
                depends=tuple(requires),
                provides=tuple(provides),
                repository=repository,
            )
        )
    return entries


class Index:
    """The packages of one or more repositories, for one architecture (and the
    architecture-independent ones), ordered the way the OS family's package manager does."""

    def __init__(self, entries: list[Entry], arch: str = "amd64", os_family: str = "debian"):
        self.compare: Compare = functools.partial(compare_versions, os_family=os_family)
        self.by_name: dict[str, list[Entry]] = {}
        self.providers: dict[str, list[tuple[Entry, Rel]]] = {}
        for e in entries:
            if e.arch not in (arch, "all", "noarch"):
                continue
            self.by_name.setdefault(e.name, []).append(e)
            for p in e.provides:
                self.providers.setdefault(p.name, []).append((e, p))
        for versions in self.by_name.values():  # highest first, as apt's/dnf's candidate
            versions.sort(key=self.newest_first)

    def newest_first(self, entry: Entry) -> Any:
        return functools.cmp_to_key(lambda a, b: self.compare(b.version, a.version))(entry)

    def exact(self, name: str, version: str) -> Entry | None:
        return next(
            (e for e in self.by_name.get(name, ()) if self.compare(e.version, version) == 0), None
        )

    def versions(self, name: str) -> list[str]:
        return [e.version for e in self.by_name.get(name, ())]


@dataclass
class Closure:
    chosen: dict[str, Entry]
    pinned: list[str]
    required_by: dict[str, list[str]]
    via: dict[str, list[str]]  # package -> virtual names it was chosen for
    unsatisfied: list[dict[str, Any]]

    def to_packages(self) -> list[dict[str, Any]]:
        names = self.pinned + sorted(n for n in self.chosen if n not in self.pinned)
        return [
            {
                "name": n,
                "version": self.chosen[n].version,
                "pinned": n in self.pinned,
                "required_by": self.required_by.get(n, []),
                "provides_for": self.via.get(n, []),
                "repository": self.chosen[n].repository,
            }
            for n in names
        ]


def _held(index: Index, chosen: dict[str, Entry], rel: Rel) -> Entry | None:
    """The entry of the closure that meets ``rel`` (itself or through a Provides)."""
    own = chosen.get(rel.name)
    if own is not None and rel.allows(own.version, index.compare):
        return own
    for e, p in index.providers.get(rel.name, ()):
        if chosen.get(e.name) is e and rel.allows(p.version, index.compare):
            return e
    return None


def _pick(index: Index, rel: Rel, chosen: dict[str, Entry]) -> tuple[Entry | None, str]:
    """(the entry that meets ``rel``, why none does)."""
    real = index.by_name.get(rel.name, [])
    if real:
        if rel.name in chosen:  # one version per package: the closure's does not fit
            return None, f"the closure holds {chosen[rel.name].pin()}"
        for e in real:
            if rel.allows(e.version, index.compare):
                return e, ""
        return None, f"the mirror has {rel.name} {', '.join(e.version for e in real)} only"
    offers = [
        e
        for e, p in index.providers.get(rel.name, [])
        if rel.allows(p.version, index.compare) and (e.name not in chosen or chosen[e.name] is e)
    ]
    if offers:  # a virtual package (or a file): the first provider by name, its newest
        return sorted(offers, key=lambda e: (e.name, index.newest_first(e)))[0], ""
    if rel.name.startswith("/"):  # a file dependency (rpm): met by a package's file list
        return None, f"no package in the mirror provides the file {rel.name}"
    return None, f"no package {rel.name} in the mirror" + (
        " (nor a matching Provides)" if rel.name in index.providers else ""
    )


def closure(index: Index, roots: list[tuple[str, str]]) -> Closure:
    """Every package ``roots`` (name, exact version) need, from ``index`` alone."""
    out = Closure({}, [], {}, {}, [])
    queue: deque[Entry] = deque()
    for name, version in roots:
        entry = index.exact(name, version)
        if entry is None:
            have = index.versions(name)
            out.unsatisfied.append(
                {
                    "package": name,
                    "version": version,
                    "needs": f"{name} (= {version})",
                    "reason": f"the mirror has {name} {', '.join(have)} only"
                    if have
                    else f"no package {name} in the mirror",
                }
            )
            continue
        if name not in out.chosen:
            out.chosen[name] = entry
            out.pinned.append(name)
            queue.append(entry)
    while queue:
        entry = queue.popleft()
        for group in entry.depends:
            have = next((h for rel in group if (h := _held(index, out.chosen, rel))), None)
            if have is not None:  # an alternative the closure already holds wins
                _need(out, have.name, entry.name)
                continue
            reasons = []
            for rel in group:
                pick, why = _pick(index, rel, out.chosen)
                if pick is not None:
                    out.chosen[pick.name] = pick
                    if pick.name != rel.name:
                        out.via.setdefault(pick.name, []).append(rel.name)
                    _need(out, pick.name, entry.name)
                    queue.append(pick)
                    break
                reasons.append(why)
            else:
                out.unsatisfied.append(
                    {
                        "package": entry.name,
                        "version": entry.version,
                        "needs": " | ".join(str(r) for r in group),
                        "reason": "; ".join(reasons),
                    }
                )
    return out


def _need(out: Closure, name: str, by: str) -> None:
    needed = out.required_by.setdefault(name, [])
    if by not in needed and by != name:
        needed.append(by)


def load(sources: list[str], arch: str = "amd64", os_family: str = "debian") -> Index:
    entries: list[Entry] = []
    for source in sources:
        entries.extend(read_entries(source))
    return Index(entries, arch, os_family)


# ---------------------------------------------------------------- an inventory's union
def inventory_stacks(
    hostvars: dict[str, dict[str, Any]], hosts: list[str], os_family: str | None
) -> tuple[str, dict[str, list[str]], list[str]]:
    """What a mirror for these inventory hosts must serve: (their OS family, each stack
    named by ``gpuboot_stack`` -> its hosts, the hosts pinning the driver alone). One
    mirror serves one OS family: ``os_family`` picks it, or the hosts' only one."""
    families: dict[str, list[str]] = {}
    for host in hosts:
        families.setdefault(str(hostvars[host].get("gpuboot_os_family", "debian")), []).append(host)
    if os_family is None:
        if len(families) > 1:
            named = "; ".join(f"{fam}: {', '.join(h)}" for fam, h in sorted(families.items()))
            raise BadInput(
                f"the hosts run several OS families ({named}): a mirror serves one",
                where="-i",
                hint="give --os-family " + " or --os-family ".join(sorted(families)),
            )
        os_family = next(iter(families), "debian")
    chosen = families.get(os_family, [])
    if not chosen:
        raise BadInput(
            f"no selected host has gpuboot_os_family {os_family!r}",
            where="--os-family",
            hint="give --os-family " + " or --os-family ".join(sorted(families)),
        )
    stacks: dict[str, list[str]] = {}
    alone: list[str] = []
    for host in chosen:
        name = hostvars[host].get("gpuboot_stack")
        if name is None:
            alone.append(host)
        else:
            stacks.setdefault(str(name), []).append(host)
    return os_family, stacks, alone


def union(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several stacks' mirror documents (gpuboot.matrix.mirror) as one: every package of
    any of them once per version (each stack's closure resolved on its own, as its nodes
    install it), every unsatisfied dependency, every module stream."""
    first = docs[0]
    out: dict[str, Any] = {k: v for k, v in first.items() if k not in ("stack", "packages")}
    packages: dict[tuple[str, str], dict[str, Any]] = {}
    for doc in docs:
        for pkg in doc["packages"]:
            key = (pkg["name"], pkg["version"])
            seen = packages.setdefault(key, {**pkg, "stacks": []})
            seen["pinned"] = seen["pinned"] or pkg["pinned"]
            seen["stacks"].append(doc["stack"])
    out["stacks"] = [doc["stack"] for doc in docs]
    out["packages"] = list(packages.values())
    if "module_streams" in first:
        out["module_streams"] = list(
            dict.fromkeys(s for doc in docs for s in doc.get("module_streams", []))
        )
    if "unsatisfied" in first:
        unique = {json.dumps(u, sort_keys=True): u for doc in docs for u in doc["unsatisfied"]}
        out["unsatisfied"] = list(unique.values())
    return out
