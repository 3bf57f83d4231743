# The one reading of rpm's package list, dnf's versionlock list and dnf's module list:
# the pinned_packages module runs them on the node (inside AnsiballZ, so stdlib only) and
# gpuboot.evidence.packages on the controller.
"""``rpm -qa --qf '%{NAME} %{EPOCHNUM} %{VERSION} %{RELEASE} %{ARCH}\\n'``,
``dnf versionlock list`` and ``dnf module list``, read strictly.

rpm's NAME, VERSION, RELEASE and ARCH carry no blank (rpmbuild refuses one), so the
query's five fields split on white space; EPOCHNUM prints 0 for a package without one.
A versionlock entry is a package spec, as the plugin writes it ``name-epoch:version-
release.*`` (``!`` first: an exclude); it may be a glob a site wrote by hand.
``dnf module list`` prints, per repository, a table ``Name Stream Profiles Summary``
whose stream carries ``[e]`` when enabled (``[d]`` default, ``[x]`` disabled) and whose
installed profiles carry ``[i]``; ``dnf module info --profile`` prints each profile's
packages as ``profile : package`` lines (``: package`` continuing the profile above).
A line that does not read so is an error, never a guess.

Installonly packages (the kernel's: dnf installs a new version beside the old ones, never
over them) are listed once per installed version: the reader keeps every version.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from dataclasses import dataclass

QUERY_FORMAT = "%{NAME} %{EPOCHNUM} %{VERSION} %{RELEASE} %{ARCH}\\n"
QUERY_ARGV = ("rpm", "-qa", "--qf", QUERY_FORMAT)
NAME = re.compile(r"^[A-Za-z0-9_+][A-Za-z0-9._+-]*$")
PART = re.compile(r"^[A-Za-z0-9._+~^]+$")  # rpm version or release (no '-', no blank)
# name-[epoch:]version-release: version and release hold no '-', so the name is the rest
NEVR = re.compile(r"^(?P<name>.+)-(?:(?P<epoch>\d+):)?(?P<version>[^-:]+)-(?P<release>[^-:]+)$")
# dnf prints these around its answer (-q drops most): never a package line
_DNF_NOISE = (
    "Last metadata expiration check:",
    "Updating Subscription Management repositories.",
)
MODULE_NONE = "No matching Modules to list"
# dnf's default installonlypkgs are kernel, kernel-PAE and whatever provides
# installonlypkg(kernel), installonlypkg(kernel-module), installonlypkg(vm) or
# multiversion(kernel); rpm -qa --qf prints no provides, so these are RHEL's package names
# that carry them (kernel-core, kernel-modules..., and the debug/rt/64k/zfcpdump variants).
INSTALLONLY = re.compile(
    r"^kernel(-PAE|-uki-virt)?$"
    r"|^kernel(-(rt|debug|rt-debug|64k|64k-debug|zfcpdump))?"
    r"(-(core|modules|modules-core|modules-extra|modules-internal|modules-partner|devel))?$"
)


class RpmParseError(ValueError):
    """rpm or dnf printed something that is not the list asked for."""


def evr(epoch: int | str, version: str, release: str) -> str:
    """How gpuboot writes a version: ``[epoch:]version-release``, epoch 0 left out."""
    return f"{version}-{release}" if str(epoch) in ("", "0") else f"{epoch}:{version}-{release}"


@dataclass(frozen=True)
class RpmPackage:
    name: str
    epoch: int
    ver: str
    rel: str
    arch: str
    locked: bool = False  # a versionlock entry holds it at this version
    # an installonly name's other installed versions (the kernel's: side by side)
    others: tuple[str, ...] = ()

    @property
    def version(self) -> str:
        return evr(self.epoch, self.ver, self.rel)

    @property
    def versions(self) -> tuple[str, ...]:
        """Every installed version of the name, this one first."""
        return (self.version, *self.others)

    def has(self, version: str) -> bool:
        """Whether ``version`` is installed (for an installonly name: among its versions)."""
        return version in self.versions

    def at(self, version: str) -> RpmPackage:
        """The same name seen at another of its installed versions."""
        epoch, _, rest = version.rpartition(":")
        ver, rel = rest.rsplit("-", 1)
        others = tuple(v for v in self.versions if v != version)
        return RpmPackage(self.name, int(epoch or 0), ver, rel, self.arch, self.locked, others)

    # the rpm database lists installed packages only: no half-installed states as dpkg's
    installed = True
    present = True

    @property
    def held(self) -> bool:
        return self.locked


def split_nevr(spec: str) -> tuple[str, str]:
    """``name-[epoch:]version-release`` -> (name, version as evr() writes it)."""
    match = NEVR.match(spec.strip())
    if not match or not NAME.match(match["name"]):
        raise RpmParseError(f"not name-[epoch:]version-release: {spec[:80]!r}")
    if not (PART.match(match["version"]) and PART.match(match["release"])):
        raise RpmParseError(f"not an rpm version-release: {spec[:80]!r}")
    return match["name"], evr(match["epoch"] or 0, match["version"], match["release"])


def is_installonly(name: str) -> bool:
    return bool(INSTALLONLY.match(name))


def parse_rpm_query(text: str) -> dict[str, RpmPackage]:
    """Every installed package (name -> package). An installonly name (the kernel's)
    listed in several versions keeps them all (the last listed first, the others in
    ``others``); any other name listed twice (two architectures) is its last line."""
    packages: dict[str, RpmPackage] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 5:
            why = "expected 'name epoch version release arch'"
            raise RpmParseError(f"unreadable rpm line: {why}, got {line[:80]!r}")
        name, epoch, version, release, arch = parts
        if not (NAME.match(name) and epoch.isdigit() and PART.match(version)):
            raise RpmParseError(f"not an rpm package line: {line[:80]!r}")
        # gpg-pubkey, the keys rpm imported, has no architecture: rpm prints "(none)"
        if not (PART.match(release) and (PART.match(arch) or arch == "(none)")):
            raise RpmParseError(f"not an rpm package line: {line[:80]!r}")
        pkg = RpmPackage(name, int(epoch), version, release, arch)
        seen = packages.get(name)
        if seen is not None and is_installonly(name) and not seen.has(pkg.version):
            pkg = RpmPackage(name, pkg.epoch, version, release, arch, others=seen.versions)
        packages[name] = pkg
    return packages


def parse_versionlock(text: str) -> list[str]:
    """The entries ``dnf versionlock list`` prints, in order (excludes keep their ``!``)."""
    entries = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or line.startswith(_DNF_NOISE):
            continue
        if len(line.split()) != 1:
            raise RpmParseError(f"not a versionlock entry: {line[:80]!r}")
        entries.append(line)
    return entries


def _forms(pkg: RpmPackage) -> tuple[str, ...]:
    """The spellings of an installed package a versionlock entry may match."""
    nvr = f"{pkg.name}-{pkg.ver}-{pkg.rel}"
    nevr = f"{pkg.name}-{pkg.epoch}:{pkg.ver}-{pkg.rel}"
    return (nvr, nevr, f"{nvr}.{pkg.arch}", f"{nevr}.{pkg.arch}")


def is_locked(pkg: RpmPackage, entries: list[str]) -> bool:
    """Whether an entry (not an exclude) holds the installed version of ``pkg``."""
    return any(
        not entry.startswith("!") and any(fnmatch.fnmatchcase(f, entry) for f in _forms(pkg))
        for entry in entries
    )


def entries_for(name: str, entries: list[str]) -> list[str]:
    """The entries that name ``name`` exactly (what ``versionlock delete name`` drops)."""
    out = []
    for entry in entries:
        match = NEVR.match(entry.lstrip("!").removesuffix(".*"))
        if match and match["name"] == name:
            out.append(entry)
    return out


def with_locks(packages: dict[str, RpmPackage], entries: list[str]) -> dict[str, RpmPackage]:
    """The packages, each ``locked`` when an entry holds its installed version and no
    entry naming it holds another (a stale entry would block the next install). An
    installonly name installed in several versions is seen at the one an entry holds
    (the pinned kernel), else as listed; locked only when every entry holds that one."""

    def locked(p: RpmPackage) -> bool:
        own = [e for e in entries_for(p.name, entries) if not e.startswith("!")]
        return is_locked(p, entries) and all(is_locked(p, [e]) for e in own)

    out = {}
    for name, pkg in packages.items():
        held = [v for v in pkg.versions if is_locked(pkg.at(v), entries)]
        seen = pkg.at(held[0]) if held else pkg
        out[name] = dataclasses.replace(seen, locked=locked(seen))
    return out


def lock_entry(name: str, version: str) -> str:
    """The entry ``dnf versionlock add`` writes for an installed version (epoch spelt)."""
    epoch, _, rest = version.rpartition(":")
    return f"{name}-{epoch or 0}:{rest}.*"


@dataclass(frozen=True)
class ModuleStream:
    name: str
    stream: str
    enabled: bool
    default: bool
    profiles: tuple[str, ...]
    installed: tuple[str, ...] = ()  # the profiles dnf marks [i]nstalled


def parse_module_list(text: str) -> list[ModuleStream]:
    """Every row of ``dnf module list`` tables. dnf answering that no module matches is
    an empty list (no stream enabled); an ``Error:`` of any other kind is not, and neither
    is an answer with no table at all (cut short: it would read as "no stream enabled")."""
    rows: list[ModuleStream] = []
    in_table = answered = False
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip():
            in_table = False
            continue
        if line.startswith("Error:"):
            if MODULE_NONE in line:
                answered = True
                continue
            raise RpmParseError(f"dnf module list failed: {line[:120]!r}")
        words = line.split()
        if words[:4] == ["Name", "Stream", "Profiles", "Summary"]:
            in_table = answered = True
            continue
        if not in_table or line.startswith("Hint:"):
            continue  # the repository's name, dnf's notes, the legend
        if raw[:1].isspace():
            continue  # a long summary dnf wrapped onto the next line
        if len(words) < 2 or not NAME.match(words[0]) or not NAME.match(words[1]):
            raise RpmParseError(f"not a module row: {line[:80]!r}")
        flags, rest = [], words[2:]
        while rest and re.fullmatch(r"\[[a-z]\]", rest[0]):
            flags.append(rest.pop(0))
        profiles, installed, more = [], [], True
        for word in rest:  # "default [d], fm [i], ks Summary...": a comma continues the list
            if re.fullmatch(r"\[[a-z]\],?", word):
                if word.startswith("[i]") and profiles:
                    installed.append(profiles[-1])
                more = word.endswith(",")
                continue
            if not more:
                break  # the summary begins
            profiles.append(word.rstrip(","))
            more = word.endswith(",")
        flagged = ("[e]" in flags, "[d]" in flags)
        rows.append(ModuleStream(words[0], words[1], *flagged, tuple(profiles), tuple(installed)))
    if not answered:
        raise RpmParseError("dnf module list printed no table and no answer (cut short?)")
    return rows


def enabled_streams(rows: list[ModuleStream]) -> dict[str, str]:
    """module name -> its enabled stream."""
    return {r.name: r.stream for r in rows if r.enabled}


def installed_profiles(rows: list[ModuleStream]) -> dict[str, tuple[str, ...]]:
    """module name -> the profiles dnf marks installed on its enabled stream."""
    return {r.name: r.installed for r in rows if r.enabled}


def parse_module_profiles(text: str) -> dict[str, tuple[str, ...]]:
    """``dnf module info --profile name:stream``: profile -> its packages. Lines are
    ``profile : package`` or ``        : package`` (the profile above continues); a
    ``Name : ...`` line opens each stream's block. Anything else is an error."""
    profiles: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if not line.strip() or line.startswith(_DNF_NOISE) or line.startswith("Hint:"):
            continue
        key, sep, value = line.partition(" : ")
        key, value = key.strip(), value.strip()
        if not sep or not value:
            raise RpmParseError(f"not a module profile line: {line[:80]!r}")
        if key == "Name":
            current = None
            continue
        if key:
            if not NAME.match(key):
                raise RpmParseError(f"not a module profile line: {line[:80]!r}")
            current = profiles.setdefault(key, [])
        if current is None or not NAME.match(value):
            raise RpmParseError(f"not a module profile line: {line[:80]!r}")
        current.append(value)
    return {k: tuple(v) for k, v in profiles.items()}
