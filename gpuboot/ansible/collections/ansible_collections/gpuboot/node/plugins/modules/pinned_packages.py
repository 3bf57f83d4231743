#!/usr/bin/python
# Copyright: gpuboot; Apache-2.0
"""Exact package pins, one module call per role: read, remove, pin, install, hold
(apt preferences and dpkg holds on Debian; dnf module streams and versionlock on EL)."""

# ruff: noqa: E402  (Ansible reads DOCUMENTATION before the imports)

from __future__ import annotations

DOCUMENTATION = r"""
module: pinned_packages
short_description: Install packages at exact versions, held and pinned
description:
  - Reads the installed versions and holds in one C(dpkg-query) call, removes installed
    packages of superseded releases, writes the pin file (apt preferences, priority 1000),
    installs the missing pins exactly (downgrades allowed, no recommends, our own holds may
    change), and holds every pinned package.
  - In check mode nothing runs on the node but that one query; C(changed) and the diff
    say what a real run would do.
  - The package manager is a backend class. C(apt) as above. C(dnf) (RHEL/Rocky/Alma) -
    one call reads C(rpm -qa), C(dnf versionlock list) and (with I(module_stream)) the
    module's enabled stream; the stream is switched (C(dnf module reset) + C(enable)), the
    versionlock entries of what changes are dropped, the pins installed exactly
    (C(dnf install name-[epoch:]version-release) downgrades too) and every pin locked
    (C(dnf versionlock add)); versionlock is EL's hold and pin in one. With
    I(module_profile) the stream's profile is then installed (C(dnf module install
    name:stream/profile), NVIDIA's C(fm) on NVSwitch systems); every package the profile
    names must be pinned here, so the locks keep it at the pin and the profile adds nothing
    unpinned.
  - Installonly packages (the kernel's) keep every installed version; a pin of one is
    installed beside the others (never a downgrade) and locked, the others left alone.
options:
  manager:
    description:
      - The node's package manager. C(auto) reads C(/etc/os-release) - dnf where C(ID) or
        C(ID_LIKE) names rhel, centos or fedora, apt elsewhere - so one role serves both.
      - I(pin_file) is read by apt only (dnf's pin is its versionlock entry).
    type: str
    choices: [auto, apt, dnf]
    default: auto
  packages:
    description:
      - Pins as C(name=version), the full Debian version (epoch and revision), for apt;
        as C(name-[epoch:]version-release) for dnf.
    type: list
    elements: str
    default: []
  pin_file:
    description: The apt preferences file this call owns (rewritten whole); apt only.
    type: path
  module_stream:
    description:
      - dnf only, EL8/EL9 (EL10 has no modularity) - the module stream the pins come
        from, C(name:stream) (C(nvidia-driver:550-open)), enabled before the install.
    type: str
  module_profile:
    description:
      - dnf only, with I(module_stream) - the stream's profile to install after the pins
        (C(fm) on NVSwitch systems, as NVIDIA's driver installation guide says); every
        package of the profile must be among I(packages).
    type: str
  owner:
    description: Who manages the pins (named in the pin file's header).
    type: str
    default: gpuboot
  supersede:
    description:
      - Regular expressions (matched against whole package names) of packages the pins
        replace. A package matching one that is present on the node and not pinned here is
        removed before the install (its hold, an earlier run's, goes with it).
    type: list
    elements: str
    default: []
  hold_installed:
    description:
      - Names held when installed, never installed; the metas that would pull a newer
        release (C(linux-image-generic)).
    type: list
    elements: str
    default: []
  unpinned:
    description:
      - Names installed at apt's candidate version when missing, neither pinned nor held
        (a site package its owner does not version).
    type: list
    elements: str
    default: []
author: gpuboot
"""

EXAMPLES = r"""
- name: "CUDA-012 | PATCH | Install, pin and hold the CUDA toolkit"
  gpuboot.node.pinned_packages:
    packages: [cuda-toolkit-12-4=12.4.1-1]
    pin_file: /etc/apt/preferences.d/gpuboot-cuda-toolkit
    owner: role cuda_toolkit
    supersede: ['cuda-toolkit-[0-9]+-[0-9]+']
"""

RETURN = r"""
installed:
  description: Pins (name=version) and unpinned names this run installed (or would).
  type: list
  returned: always
removed:
  description: Packages of superseded releases removed (or that would be).
  type: list
  returned: always
held:
  description: Pinned and hold_installed packages held by this run (or that would be).
  type: list
  returned: always
pinned:
  description: Whether the pin file (dnf - the versionlock entries) was (or would be) rewritten.
  type: bool
  returned: always
streams:
  description:
    - Module streams this run enabled or whose profile it installed (or would),
      C(name:stream) or C(name:stream/profile); dnf only.
  type: list
  returned: always
"""

import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuboot.node.plugins.module_utils import rpm
from ansible_collections.gpuboot.node.plugins.module_utils.dpkg import (
    QUERY_ARGV,
    DpkgParseError,
    parse_dpkg_query,
)
from ansible_collections.gpuboot.node.plugins.module_utils.files import read_file, write_file

PIN_PRIORITY = 1000
_PIN = re.compile(r"^([a-z0-9][a-z0-9+.-]+)=((?:[0-9]+:)?[A-Za-z0-9.+~-]+)$")


class PinError(Exception):
    """The node's state or a tool's answer does not allow a truthful result."""


class AptBackend:
    """Debian/Ubuntu: dpkg-query reads, apt-get changes, dpkg selections hold, apt
    preferences pin. Every command is an argv list: no shell ever sees an input."""

    SEP = "="  # name=version
    # apt waits for the dpkg lock (unattended-upgrades may hold it) instead of failing
    APT = ("apt-get", "-q", "-y", "-o", "DPkg::Lock::Timeout=120")

    def __init__(self, module):
        self.module = module
        self.pin_file = module.params["pin_file"]
        if not self.pin_file:
            raise PinError("pin_file is required with manager apt")
        if module.params["module_stream"] or module.params["module_profile"]:
            raise PinError("module_stream is dnf's (EL module streams); apt has none")

    def _run(self, argv, data=None, ok=(0,)):
        rc, out, err = self.module.run_command(
            list(argv),
            data=data,
            environ_update={"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"},
            binary_data=data is not None,
        )
        if rc not in ok:
            raise PinError(f"{argv[0]} exited {rc}: {(err or out).strip()[-800:]}")
        return out

    def parse_pins(self, packages):
        pins = []
        for item in packages:
            match = _PIN.match(item.strip())
            if not match:
                raise PinError(f"not an exact pin name=version: {item!r}")
            pins.append((match.group(1), match.group(2)))
        return pins

    def state(self):
        """Every package dpkg knows (name -> DpkgPackage), read in one call."""
        text = self._run(QUERY_ARGV)
        if not text.strip():
            raise PinError("dpkg-query listed no package at all: the node's dpkg is unreadable")
        try:
            packages = parse_dpkg_query(text)
        except DpkgParseError as exc:
            raise PinError(f"dpkg-query: {exc}") from exc
        return packages

    def streams(self):
        return []  # apt has no module streams

    def pin_texts(self, pins, owner, packages, held, removed):
        """(header, before, after) of the pin file: no pin, no pin file (none written)."""
        before = read_file(self.pin_file)[0]
        return self.pin_file, before, (self.pin_text(pins, owner) if pins else before)

    def pin_text(self, pins, owner):
        lines = [
            f"# Managed by gpuboot ({owner}): nothing but these exact versions.",
            f"# {PIN_PRIORITY} (not 1001): apt still downgrades to them, and an explicit",
            "# name=version request of the next stack (1001 for that request) wins.",
            "",
        ]
        for name, version in pins:
            lines += [
                f"Package: {name}",
                f"Pin: version {version}",
                f"Pin-Priority: {PIN_PRIORITY}",
                "",
            ]
        return "\n".join(lines)

    def write_pins(self, text):
        # the pin first: apt then installs what it names, and no older pin can outvote it
        write_file(self.pin_file, text)

    def remove(self, names):
        self._run([*self.APT, "--allow-change-held-packages", "remove", *names])

    def unlock(self, names):
        """apt's holds do not stop an explicit install (--allow-change-held-packages)."""

    def switch(self, streams):
        raise PinError("apt has no module streams")

    def check_profile(self, pins, unpinned):
        """apt has no module profiles."""

    def install_profiles(self, streams):
        """apt has no module profiles."""

    def install(self, pins, names=()):
        self._run(
            [
                *self.APT,
                "--no-install-recommends",
                "--allow-downgrades",
                "--allow-change-held-packages",  # our own hold: the pin moves with the stack
                "-o",
                "Dpkg::Options::=--force-confdef",
                "-o",
                "Dpkg::Options::=--force-confold",
                "install",
                *[f"{name}={version}" for name, version in pins],
                *names,
            ]
        )

    def hold(self, pairs):
        self._run(["dpkg", "--set-selections"], data="".join(f"{n} hold\n" for n, _ in pairs))


class DnfBackend:
    """RHEL/Rocky/Alma: rpm reads, dnf changes, the versionlock plugin holds (its entry
    is the pin too: every other version of the name is excluded), module streams choose
    the driver branch on EL8/EL9. Inputs reach dnf as argv items, never through a shell."""

    SEP = "-"  # name-[epoch:]version-release
    DNF = ("dnf", "-y", "-q", "--setopt=install_weak_deps=False")
    # One call: rpm's list, the versionlock entries and (when asked, "$1") the module's
    # enabled stream, each section behind a marker; a failing reader fails the call.
    READ = (
        f"rpm -qa --qf '{rpm.QUERY_FORMAT}' || exit 101\n"
        "echo '@@versionlock'\n"
        # no repository: the list is a local file, and reading it must not refresh metadata
        "dnf -q --disablerepo='*' versionlock list || exit 102\n"
        '[ -n "$1" ] || exit 0\n'
        "echo '@@modules'\n"
        'dnf -q module list --enabled "$1" 2>&1 || echo "@@rc $?"\n'
        # with a profile ("$2", name:stream): which packages the profile installs
        '[ -n "$2" ] || exit 0\n'
        "echo '@@profiles'\n"
        'dnf -q module info --profile "$2" || exit 103\n'
    )

    def __init__(self, module):
        self.module = module
        self.module_stream = module.params["module_stream"]
        if self.module_stream and not re.fullmatch(r"[\w.+-]+:[\w.+-]+", self.module_stream):
            raise PinError(f"module_stream is not name:stream: {self.module_stream!r}")
        self.module_profile = module.params["module_profile"]
        if self.module_profile and not self.module_stream:
            raise PinError("module_profile needs module_stream (the stream it belongs to)")
        if self.module_profile and not re.fullmatch(r"[\w.+-]+", self.module_profile):
            raise PinError(f"module_profile is not a profile name: {self.module_profile!r}")
        self.enabled = {}
        self.installed_profiles = {}
        self.profile_packages = ()

    def _run(self, argv, ok=(0,)):
        rc, out, err = self.module.run_command(list(argv), environ_update={"LC_ALL": "C"})
        if rc not in ok:
            raise PinError(
                f"{argv[0]} {argv[-1] if len(argv) < 4 else ''} exited {rc}: "
                f"{(err or out).strip()[-800:]}"
            )
        return out

    def parse_pins(self, packages):
        try:
            return [rpm.split_nevr(item) for item in packages]
        except rpm.RpmParseError as exc:
            raise PinError(f"not an exact pin name-[epoch:]version-release: {exc}") from exc

    def state(self):
        """Installed packages (name -> RpmPackage, locked when versionlock holds exactly
        that version) and the module's enabled stream, read in one call."""
        module = self.module_stream.split(":")[0] if self.module_stream else ""
        profile_of = self.module_stream if self.module_profile else ""
        rc, out, err = self.module.run_command(
            ["sh", "-c", self.READ, "gpuboot-read", module, profile_of],
            environ_update={"LC_ALL": "C"},
        )
        if rc != 0:
            who = {101: "rpm -qa", 102: "dnf versionlock list", 103: "dnf module info"}
            raise PinError(f"{who.get(rc, 'sh')} failed (exit {rc}): {(err or out).strip()[-800:]}")
        listing, _, rest = out.partition("@@versionlock\n")
        locks, _, rest = rest.partition("@@modules\n")
        modules, _, profiles = rest.partition("@@profiles\n")
        try:
            packages = rpm.parse_rpm_query(listing)
            self.entries = rpm.parse_versionlock(locks)
            if module:
                failed = re.search(r"^@@rc (\d+)$", modules, re.M)
                if failed and rpm.MODULE_NONE not in modules:
                    raise PinError(f"dnf module list failed: {modules.strip()[-800:]}")
                rows = rpm.parse_module_list(re.sub(r"^@@rc \d+$", "", modules, flags=re.M))
                self.enabled = rpm.enabled_streams(rows)
                self.installed_profiles = rpm.installed_profiles(rows)
            if self.module_profile:
                known = rpm.parse_module_profiles(profiles)
                if self.module_profile not in known:
                    raise PinError(
                        f"{self.module_stream} has no profile {self.module_profile!r} "
                        f"(it has: {', '.join(sorted(known)) or 'none'})"
                    )
                self.profile_packages = known[self.module_profile]
        except rpm.RpmParseError as exc:
            raise PinError(str(exc)) from exc
        if not packages:
            raise PinError("rpm listed no package at all: the node's rpm database is unreadable")
        return rpm.with_locks(packages, self.entries)

    def streams(self):
        """The module streams to enable (``name:stream``) or whose profile to install
        (``name:stream/profile``): none when the stream is the enabled one and the profile
        is installed on it."""
        if not self.module_stream:
            return []
        name, stream = self.module_stream.split(":")
        spec = f"{self.module_stream}/{self.module_profile}" if self.module_profile else ""
        if self.enabled.get(name) != stream:
            return [spec or self.module_stream]
        if spec and self.module_profile not in self.installed_profiles.get(name, ()):
            return [spec]
        return []

    def check_profile(self, pins, unpinned):
        """Every package of the profile is pinned here: the locks then hold it at its pin
        when the profile is installed (an unpinned one would come at the stream's latest)."""
        names = {n for n, _ in pins} | set(unpinned)
        loose = sorted(set(self.profile_packages) - names)
        if loose:
            raise PinError(
                f"profile {self.module_profile} of {self.module_stream} installs "
                f"{', '.join(loose)}, which no pin names: pin them too (the stack's "
                "packages) or choose another profile"
            )

    def pin_texts(self, pins, owner, packages, held, removed):
        """The versionlock entries naming this call's packages, now and as they should be
        (a removed package's go with it)."""
        want = {n: packages[n].version for n in held if n in packages}
        want.update(pins)
        names = sorted(set(want) | set(removed))
        before = [e for n in names for e in rpm.entries_for(n, self.entries)]
        after = [rpm.lock_entry(n, want[n]) for n in names if n in want]
        return "versionlock", "".join(f"{e}\n" for e in before), "".join(f"{e}\n" for e in after)

    def write_pins(self, text):
        """The entries are written by hold(), after the install (a lock on the wanted
        version before it is installed would make dnf refuse every other one)."""

    def remove(self, names):
        self.unlock(names)
        self._run([*self.DNF, "remove", *names])

    def unlock(self, names):
        if names:
            self._run([*self.DNF, "versionlock", "delete", *names])

    def switch(self, streams):
        for spec in streams:
            name, stream = spec.split("/")[0].split(":")
            if self.enabled.get(name) == stream:
                continue  # only the profile is missing: installed after the pins
            # reset first: dnf refuses to enable a second stream of an enabled module
            self._run([*self.DNF, "module", "reset", name])
            self._run([*self.DNF, "module", "enable", f"{name}:{stream}"])

    def install_profiles(self, streams):
        """After the pins are installed and locked: the profile, as NVIDIA's guide installs
        the driver (its packages are all pinned and locked: dnf records the profile and
        changes no package)."""
        for spec in streams:
            if "/" in spec:
                self._run([*self.DNF, "module", "install", spec])

    def install(self, pins, names=()):
        self._run([*self.DNF, "install", *[f"{n}-{v}" for n, v in pins], *names])

    def hold(self, pairs):
        # an entry of another version (the last stack's) goes first: one entry per name
        self.unlock([n for n, _ in pairs])
        self._run([*self.DNF, "versionlock", "add", *[f"{n}-{v}" for n, v in pairs]])


BACKENDS = {"apt": AptBackend, "dnf": DnfBackend}


def node_manager(path="/etc/os-release"):
    """dnf on the RHEL family (RHEL, Rocky, Alma, CentOS, Fedora), apt elsewhere."""
    words = set()
    for line in read_file(path)[0].splitlines():
        key, _, value = line.partition("=")
        if key in ("ID", "ID_LIKE"):
            words.update(value.strip().strip("\"'").split())
    return "dnf" if words & {"rhel", "centos", "fedora"} else "apt"


def check_pins(pins, packages):
    names = [name for name, _ in pins]
    if len(set(names)) != len(names):
        raise PinError(f"a package pinned twice: {', '.join(sorted(packages))}")
    return pins


def plan(pins, packages, supersede, hold_installed=(), unpinned=()):
    """What a run must do, from the pins and the node's packages (a pure function):
    (superseded to remove, pins to install, names to hold, unpinned names to install)."""
    names = {name for name, _ in pins} | set(unpinned)
    patterns = [re.compile(p) for p in supersede]
    removed = sorted(
        p.name
        for p in packages.values()
        if p.present and p.name not in names and any(r.fullmatch(p.name) for r in patterns)
    )
    missing = [
        (name, version)
        for name, version in pins
        if not (name in packages and packages[name].installed and has(packages[name], version))
    ]
    absent = [n for n in unpinned if not (n in packages and packages[n].installed)]
    holds = [name for name, _ in pins]
    holds += [n for n in hold_installed if n in packages and packages[n].installed]
    pin_of = dict(pins)
    # held at the pin: an installonly kernel held at another of its installed versions
    # is not (apt and other rpm names: the installed version is the pin, or missing)
    unheld = [
        n
        for n in holds
        if not (
            n in packages
            and packages[n].held
            and (n not in pin_of or packages[n].version == pin_of[n])
        )
    ]
    # apt drops the hold of a package it was allowed to change: hold those again too
    held = sorted(set(unheld) | {name for name, _ in missing})
    return removed, missing, held, absent


def has(pkg, version):
    """Whether ``version`` of the package is installed (rpm: an installonly name's
    versions side by side; dpkg: its one version)."""
    return pkg.has(version) if hasattr(pkg, "has") else pkg.version == version


def describe(pins, packages):
    """The diff's view of the pinned packages: version(s) (or absent) and hold."""
    lines = []
    for name, _ in pins:
        p = packages.get(name)
        seen = ", ".join(getattr(p, "versions", ())) or getattr(p, "version", "")
        version = seen if p is not None and p.installed else "(not installed)"
        lines.append(f"{name} {version}{' held' if p is not None and p.held else ''}")
    return "\n".join(lines) + "\n"


def run(module, backend):
    params = module.params
    pins = check_pins(backend.parse_pins(params["packages"]), params["packages"])
    for pattern in params["supersede"]:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise PinError(f"supersede pattern {pattern!r}: {exc}") from exc
    unpinned = params["unpinned"]
    if not pins and not unpinned:
        raise PinError("nothing to install: neither packages nor unpinned names")
    before = backend.state()
    backend.check_profile(pins, unpinned)
    removed, missing, held, absent = plan(
        pins, before, params["supersede"], params["hold_installed"], unpinned
    )
    streams = backend.streams()
    version_of = {**{n: before[n].version for n in held if n in before}, **dict(pins)}
    header, pin_before, pin_after = backend.pin_texts(pins, params["owner"], before, held, removed)
    pinned = pin_before != pin_after
    result = {
        "changed": bool(removed or missing or held or pinned or absent or streams),
        "installed": [f"{n}{backend.SEP}{v}" for n, v in missing] + absent,
        "removed": removed,
        "held": held,
        "pinned": pinned,
        "streams": streams,
    }
    if module._diff:
        # what a converged node shows: every pin installed at its version and held
        want = "".join(f"{n} {v} held\n" for n, v in pins)
        want += "".join(f"{n} held\n" for n in held if n not in dict(pins))
        want += "".join(f"{n} (candidate)\n" for n in absent)
        result["diff"] = [
            {"before_header": header, "before": pin_before, "after": pin_after},
            {
                "before_header": "packages",
                "before": describe(
                    [*pins, *((n, "") for n in held + absent if n not in dict(pins))], before
                )
                + "".join(f"{n} {before[n].version} (superseded)\n" for n in removed),
                "after": want,
            },
        ]
        if streams:
            profiles = backend.installed_profiles
            result["diff"].append(
                {
                    "before_header": "module streams",
                    "before": "".join(
                        f"{n}:{s}{''.join('/' + p for p in profiles.get(n, ()))}\n"
                        for n, s in sorted(backend.enabled.items())
                    ),
                    "after": "".join(f"{s}\n" for s in streams),
                }
            )
    if module.check_mode or not result["changed"]:
        return result
    if removed:
        backend.remove(removed)
    if streams:
        backend.switch(streams)
    if pinned:
        backend.write_pins(pin_after)
    if missing:
        backend.unlock([n for n, _ in missing])  # dnf: the old version's lock excludes the new
    if missing or absent:
        backend.install(missing, absent)
    if held:
        backend.hold([(n, version_of[n]) for n in held])
    if streams:
        backend.install_profiles(streams)
    # trust no exit code alone: read the node again, every pin installed and held
    after = backend.state()
    wrong = [
        f"{name} {after[name].version if name in after else 'absent'}"
        f"{'' if name in after and after[name].held else ' unheld'}"
        for name, version in pins
        if not (
            name in after
            and after[name].installed
            and after[name].version == version  # the locked one, for an installonly name
            and after[name].held
        )
    ]
    wrong += [f"{n} absent" for n in unpinned if not (n in after and after[n].installed)]
    wrong += [f"{n} unheld" for n in held if n not in dict(pins) and not after[n].held]
    wrong += [
        f"module stream {s} not enabled (or its profile not installed)" for s in backend.streams()
    ]
    if wrong:
        raise PinError(f"after the install, not as pinned: {', '.join(wrong)}")
    return result


def main():
    module = AnsibleModule(
        argument_spec={
            "packages": {"type": "list", "elements": "str", "default": []},
            "manager": {"type": "str", "choices": ["auto", "apt", "dnf"], "default": "auto"},
            "pin_file": {"type": "path"},
            "module_stream": {"type": "str"},
            "module_profile": {"type": "str"},
            "owner": {"type": "str", "default": "gpuboot"},
            "supersede": {"type": "list", "elements": "str", "default": []},
            "hold_installed": {"type": "list", "elements": "str", "default": []},
            "unpinned": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    try:
        manager = module.params["manager"]
        result = run(module, BACKENDS[node_manager() if manager == "auto" else manager](module))
    except PinError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
