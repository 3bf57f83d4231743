#!/usr/bin/python
# Copyright: gpuboot; Apache-2.0
"""RoCE QoS of every rail in one run: trust, PFC and the ECN (DCQCN) switches."""

# ruff: noqa: E402  (Ansible reads DOCUMENTATION before the imports)
from __future__ import annotations

DOCUMENTATION = r"""
module: roce_qos
short_description: Trust, PFC and ECN of the RoCE rails, read and set in one run
description:
  - Reads each rail's QoS (C(mlnx_qos -i <dev>)) and its ECN switches
    (C(<sysfs>/class/net/<dev>/ecn/roce_np|roce_rp/enable/<prio>)), every rail before it
    changes any.
  - Sets only what differs, with the command the boot unit runs
    (C(mlnx_qos -i <dev> --trust <trust> --pfc <8 flags>)), and writes 1 to each ECN switch
    of the PFC priorities that is off.
  - A rail whose mlnx_qos fails, or whose output lacks the trust line or part of the PFC
    row (cut short), fails the task; unreadable is never taken as already right.
  - In check mode it changes nothing and reports what would change (C(--diff) shows each
    rail's before and after). A node without mlnx_qos yet (DOCA-OFED installs it earlier in
    the same run) has every rail reported as would change, not a failure; so has a rail
    whose mlnx_qos fails (openibd, started earlier in the real run, brings it up), with a
    warning that names it.
options:
  interfaces:
    description: Network devices of the RoCE rails.
    type: list
    elements: str
    required: true
  trust:
    description: Which header field selects the priority.
    type: str
    choices: [dscp, pcp]
    default: dscp
  pfc_priorities:
    description: Priorities (0-7) with priority flow control on; all others off.
    type: list
    elements: int
    default: [3]
  ecn:
    description: Turn on ECN (notification and reaction point) on the PFC priorities;
      false leaves the switches as they are.
    type: bool
    default: true
  sysfs:
    description: Where sysfs is mounted as the node sees it (the lab's emulated kernel has its own).
    type: path
    default: /sys
author: gpuboot
"""

RETURN = r"""
rails:
  description: Per rail, its state as read before any change (C(trust), C(pfc_priorities)
    and C(ecn) switch -> on; null where check mode could not read it yet), whether
    trust and PFC were (would be) set (C(set_qos)) and the ECN switches turned on
    (C(enable_ecn)).
  type: dict
  returned: always
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuboot.node.plugins.module_utils.mlnx_qos import (
    MlnxQosParseError,
    parse_mlnx_qos,
    unreadable,
)

PROTOCOLS = ("roce_np", "roce_rp")  # DCQCN notification point, reaction point
# Linux's dev_valid_name (at most 15 characters, no '/', ':' or blank), and no leading '-'
# (mlnx_qos would read it as an option): the name also becomes a sysfs path.
NETDEV = re.compile(r"^[^-/:\s][^/:\s]{0,14}$")


def pfc_flags(priorities):
    """[3] -> '0,0,0,1,0,0,0,0', as mlnx_qos --pfc takes it."""
    return ",".join("1" if p in priorities else "0" for p in range(8))


def switches(priorities):
    """The ECN switches of the PFC priorities, relative to <sysfs>/class/net/<dev>/ecn."""
    return [f"{proto}/enable/{p}" for proto in PROTOCOLS for p in sorted(priorities)]


class Rails:
    """mlnx_qos by argv, the ECN switches as files."""

    def __init__(self, module, mlnx_qos):
        self.module = module
        self.mlnx_qos = mlnx_qos  # its path; None: not installed (check mode only)
        self.sysfs = module.params["sysfs"]
        self.changed = False  # a later rail failing still reports what earlier ones got

    def ecn_path(self, dev, switch):
        return os.path.join(self.sysfs, "class", "net", dev, "ecn", switch)

    def read(self, dev, ecn_switches):
        """{trust, pfc_priorities, ecn}; None values where --check cannot read the rail yet."""
        state = {"trust": None, "pfc_priorities": None, "ecn": dict.fromkeys(ecn_switches)}
        if not self.mlnx_qos:
            return state  # no OFED yet (--check): nor its driver's switches
        rc, out, err = self.module.run_command([self.mlnx_qos, "-i", dev])
        if rc != 0:
            why = f"mlnx_qos -i {dev} exited {rc}: {(err or out).strip()[:300]}"
            if not self.module.check_mode:
                self.fail(dev, why)
            # --check: the real run starts openibd (which brings the rails up) before this
            self.module.warn(f"RoCE rail {dev}: {why}; in --check taken as would change")
            return state
        try:
            qos = parse_mlnx_qos(out)
        except MlnxQosParseError as exc:
            self.fail(dev, f"mlnx_qos -i {dev} printed no QoS listing ({exc})")
        why = unreadable(qos)
        if why:
            self.fail(dev, f"mlnx_qos -i {dev} output is cut short or unreadable: {why}")
        state["trust"], state["pfc_priorities"] = qos.trust_state, list(qos.pfc_priorities)
        for switch in ecn_switches:
            state["ecn"][switch] = self.ecn_on(dev, switch)
        return state

    def ecn_on(self, dev, switch):
        path = self.ecn_path(dev, switch)
        try:
            with open(path, encoding="utf-8") as fh:
                value = fh.read().strip()
        except OSError as exc:
            self.fail(dev, f"cannot read the ECN switch {path}: {exc.strerror}")
        if value not in ("0", "1"):
            self.fail(dev, f"ECN switch {path} reads {value[:40]!r}, not 0 or 1")
        return value == "1"

    def set_qos(self, dev, trust, flags):
        argv = [self.mlnx_qos, "-i", dev, "--trust", trust, "--pfc", flags]
        rc, out, err = self.module.run_command(argv)
        if rc != 0:
            self.fail(dev, f"{' '.join(argv[1:])} exited {rc}: {(err or out).strip()[:300]}")

    def enable_ecn(self, dev, switch):
        try:
            with open(self.ecn_path(dev, switch), "w", encoding="utf-8") as fh:
                fh.write("1\n")
        except OSError as exc:
            self.fail(dev, f"cannot turn on ECN {switch}: {exc.strerror}")

    def fail(self, dev, msg):
        self.module.fail_json(msg=f"RoCE rail {dev}: {msg}", changed=self.changed)


def plan(state, trust, priorities):
    """(set trust and PFC, ECN switches to turn on) for one rail as read."""
    set_qos = state["trust"] != trust or state["pfc_priorities"] != sorted(priorities)
    return set_qos, [s for s, on in state["ecn"].items() if not on]


def _lines(trust, pfc, ecn):
    shown = {True: "1", False: "0", None: "unknown"}
    lines = [f"trust: {trust or 'unknown'}", f"pfc: {pfc or 'unknown'}"]
    return "\n".join(lines + [f"{s}: {shown[on]}" for s, on in ecn.items()]) + "\n"


def diff(dev, state, trust, flags):
    pfc = pfc_flags(state["pfc_priorities"]) if state["pfc_priorities"] is not None else None
    return {
        "before_header": dev,
        "after_header": dev,
        "before": _lines(state["trust"], pfc, state["ecn"]),
        "after": _lines(trust, flags, dict.fromkeys(state["ecn"], True)),
    }


def main():
    module = AnsibleModule(
        argument_spec={
            "interfaces": {"type": "list", "elements": "str", "required": True},
            "trust": {"type": "str", "choices": ["dscp", "pcp"], "default": "dscp"},
            "pfc_priorities": {"type": "list", "elements": "int", "default": [3]},
            "ecn": {"type": "bool", "default": True},
            "sysfs": {"type": "path", "default": "/sys"},
        },
        supports_check_mode=True,
    )
    p = module.params
    bad = [d for d in p["interfaces"] if not NETDEV.match(d) or d in (".", "..")]
    if bad:
        module.fail_json(msg=f"not a network device name: {', '.join(map(repr, bad))}")
    if any(not 0 <= prio <= 7 for prio in p["pfc_priorities"]):
        module.fail_json(msg=f"pfc_priorities must be 0-7, got {p['pfc_priorities']}")
    priorities = sorted(set(p["pfc_priorities"]))
    trust, flags = p["trust"], pfc_flags(priorities)
    ecn_switches = switches(priorities) if p["ecn"] else []
    # Without mlnx_qos only a preview can go on: DOCA-OFED, earlier in the run, brings it.
    rails = Rails(module, module.get_bin_path("mlnx_qos", required=not module.check_mode))
    # Every rail is read before any is changed: one unreadable rail leaves all untouched.
    states = {dev: rails.read(dev, ecn_switches) for dev in p["interfaces"]}
    result = {"changed": False, "rails": {}, "diff": []}
    for dev, state in states.items():
        set_qos, ecn_off = plan(state, trust, priorities)
        result["rails"][dev] = {**state, "set_qos": set_qos, "enable_ecn": ecn_off}
        if not (set_qos or ecn_off):
            continue
        result["diff"].append(diff(dev, state, trust, flags))
        if not module.check_mode:
            if set_qos:
                rails.set_qos(dev, trust, flags)
                rails.changed = True
            for switch in ecn_off:
                rails.enable_ecn(dev, switch)
                rails.changed = True
        result["changed"] = True
    if not module._diff:
        del result["diff"]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
