#!/usr/bin/python
# Copyright: gpuboot; Apache-2.0
"""Exact package pins, one module call per role: read, remove, pin, install, hold."""

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
  - The package manager is a backend class (apt today; dnf versionlock plugs in beside it).
options:
  packages:
    description: Pins as C(name=version), the full Debian version (epoch and revision).
    type: list
    elements: str
    default: []
  pin_file:
    description: The apt preferences file this call owns (rewritten whole).
    type: path
    required: true
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
      - Names held when installed, never installed: the metas that would pull a newer
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
  description: Whether the pin file was (or would be) rewritten.
  type: bool
  returned: always
"""

import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuboot.node.plugins.module_utils.dpkg import (
    QUERY_ARGV,
    DpkgParseError,
    parse_dpkg_query,
)

PIN_PRIORITY = 1000
_PIN = re.compile(r"^([a-z0-9][a-z0-9+.-]+)=((?:[0-9]+:)?[A-Za-z0-9.+~-]+)$")


class PinError(Exception):
    """The node's state or a tool's answer does not allow a truthful result."""


class AptBackend:
    """Debian/Ubuntu: dpkg-query reads, apt-get changes, dpkg selections hold, apt
    preferences pin. Every command is an argv list: no shell ever sees an input."""

    # apt waits for the dpkg lock (unattended-upgrades may hold it) instead of failing
    APT = ("apt-get", "-q", "-y", "-o", "DPkg::Lock::Timeout=120")

    def __init__(self, module):
        self.module = module

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

    def remove(self, names):
        self._run([*self.APT, "--allow-change-held-packages", "remove", *names])

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

    def hold(self, names):
        self._run(["dpkg", "--set-selections"], data="".join(f"{n} hold\n" for n in names))


BACKENDS = {"apt": AptBackend}


def parse_pins(packages):
    pins = []
    for item in packages:
        match = _PIN.match(item.strip())
        if not match:
            raise PinError(f"not an exact pin name=version: {item!r}")
        pins.append((match.group(1), match.group(2)))
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
        if not (name in packages and packages[name].installed and packages[name].version == version)
    ]
    absent = [n for n in unpinned if not (n in packages and packages[n].installed)]
    holds = [name for name, _ in pins]
    holds += [n for n in hold_installed if n in packages and packages[n].installed]
    unheld = [n for n in holds if not (n in packages and packages[n].held)]
    # apt drops the hold of a package it was allowed to change: hold those again too
    held = sorted(set(unheld) | {name for name, _ in missing})
    return removed, missing, held, absent


def describe(pins, packages):
    """The diff's view of the pinned packages: version (or absent) and hold."""
    lines = []
    for name, _ in pins:
        p = packages.get(name)
        version = p.version if p is not None and p.installed else "(not installed)"
        lines.append(f"{name} {version}{' held' if p is not None and p.held else ''}")
    return "\n".join(lines) + "\n"


def read_file(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return ""


def write_file(path, text):
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".gpuboot-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def run(module, backend):
    params = module.params
    pins = parse_pins(params["packages"])
    for pattern in params["supersede"]:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise PinError(f"supersede pattern {pattern!r}: {exc}") from exc
    unpinned = params["unpinned"]
    if not pins and not unpinned:
        raise PinError("nothing to install: neither packages nor unpinned names")
    before = backend.state()
    removed, missing, held, absent = plan(
        pins, before, params["supersede"], params["hold_installed"], unpinned
    )
    pin_before = read_file(params["pin_file"])
    # no pin, no pin file: the run writes none rather than an empty one
    pin_after = backend.pin_text(pins, params["owner"]) if pins else pin_before
    pinned = pin_before != pin_after
    result = {
        "changed": bool(removed or missing or held or pinned or absent),
        "installed": [f"{n}={v}" for n, v in missing] + absent,
        "removed": removed,
        "held": held,
        "pinned": pinned,
    }
    if module._diff:
        # what a converged node shows: every pin installed at its version and held
        want = "".join(f"{n} {v} held\n" for n, v in pins)
        want += "".join(f"{n} held\n" for n in held if n not in dict(pins))
        want += "".join(f"{n} (candidate)\n" for n in absent)
        result["diff"] = [
            {"before_header": params["pin_file"], "before": pin_before, "after": pin_after},
            {
                "before_header": "packages",
                "before": describe(
                    [*pins, *((n, "") for n in held + absent if n not in dict(pins))], before
                )
                + "".join(f"{n} {before[n].version} (superseded)\n" for n in removed),
                "after": want,
            },
        ]
    if module.check_mode or not result["changed"]:
        return result
    if removed:
        backend.remove(removed)
    # the pin first: apt then installs what it names, and no older pin can outvote it
    if pinned:
        write_file(params["pin_file"], pin_after)
    if missing or absent:
        backend.install(missing, absent)
    if held:
        backend.hold(held)
    # trust no exit code alone: read the node again, every pin installed and held
    after = backend.state()
    wrong = [
        f"{name} {after[name].version if name in after else 'absent'}"
        f"{'' if name in after and after[name].held else ' unheld'}"
        for name, version in pins
        if not (
            name in after
            and after[name].installed
            and after[name].version == version
            and after[name].held
        )
    ]
    wrong += [f"{n} absent" for n in unpinned if not (n in after and after[n].installed)]
    wrong += [f"{n} unheld" for n in held if n not in dict(pins) and not after[n].held]
    if wrong:
        raise PinError(f"after the install, not as pinned: {', '.join(wrong)}")
    return result


def main():
    module = AnsibleModule(
        argument_spec={
            "packages": {"type": "list", "elements": "str", "default": []},
            "pin_file": {"type": "path", "required": True},
            "owner": {"type": "str", "default": "gpuboot"},
            "supersede": {"type": "list", "elements": "str", "default": []},
            "hold_installed": {"type": "list", "elements": "str", "default": []},
            "unpinned": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    try:
        result = run(module, BACKENDS["apt"](module))
    except PinError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
