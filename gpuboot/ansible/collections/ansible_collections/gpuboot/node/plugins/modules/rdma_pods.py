#!/usr/bin/python
# Copyright: gpuboot; Apache-2.0
"""What an SR-IOV or RDMA-shared CNI needs of the RoCE rails, one part per run: the
firmware's SR-IOV settings, the VFs, the MTU, the RDMA namespace mode, RDMA CM's defaults."""

# ruff: noqa: E402  (Ansible reads DOCUMENTATION before the imports)
from __future__ import annotations

DOCUMENTATION = r"""
module: rdma_pods
short_description: Prepare the RoCE rails for RDMA in Kubernetes pods, one part per run
description:
  - Reads the part's state on every rail before it changes any, then sets only what differs.
  - C(part=firmware) - each rail's firmware must offer I(vfs) VFs (C(sriov_totalvfs)); when it
    does not, C(mlxconfig -y -d <pci> set SRIOV_EN=1 NUM_OF_VFS=<n>) (unless its next-boot
    values already do) and I(reboot_marker) records that a reboot applies it. Never reboots.
  - C(part=vfs) - writes I(vfs) to each rail's C(sriov_numvfs) (0 first when it held another
    count, as the kernel requires), waits with C(udevadm settle) for the VFs and checks they
    came. A rail whose firmware offers too few VFs is left alone with a warning while a reboot
    is pending (I(reboot_marker) exists), and fails the task otherwise.
  - C(part=mtu) - each rail's netdev and its VFs' get I(mtu) (C(<sysfs>/class/net/<if>/mtu)).
  - C(part=netns) - the RDMA subsystem's namespace mode (C(rdma system)), set with
    C(rdma system set netns <mode>).
  - C(part=cm) - RDMA CM's default RoCE mode (RoCE v2) and ToS (I(cm_tos)) of every rail's
    RDMA device and its VFs' (C(<configfs>/rdma_cm/<dev>/ports/1/default_roce_mode|tos), the
    group made with mkdir as MOFED's cma_roce_mode does).
  - Check mode changes nothing and reports what would change (C(--diff) shows before and after
    per rail); what cannot be read yet (VFs still to be made) is shown as would change.
options:
  part:
    description: Which part to bring in line.
    type: str
    choices: [firmware, vfs, mtu, netns, cm]
    required: true
  interfaces:
    description: Network devices of the RoCE rails (the PFs).
    type: list
    elements: str
    required: true
  vfs:
    description: VFs per rail (0 with an RDMA-shared CNI).
    type: int
    default: 0
  mtu:
    description: MTU of every rail and VF netdev.
    type: int
    default: 9000
  netns:
    description: RDMA namespace mode.
    type: str
    choices: [shared, exclusive]
    default: shared
  cm_tos:
    description: RDMA CM's default ToS (the DSCP of the lossless class, shifted left by 2).
    type: int
    default: 104
  reboot_marker:
    description: The file that records a pending reboot for a firmware change.
    type: path
    default: /var/run/reboot-required.gpuboot-rdma-vfs
  sysfs:
    description: Where sysfs is mounted as the node sees it (the lab's emulated kernel has its own).
    type: path
    default: /sys
  configfs:
    description: Where configfs is mounted as the node sees it.
    type: path
    default: /sys/kernel/config
author: gpuboot
"""

RETURN = r"""
rails:
  description: Per rail, what was read and what was (would be) set.
  type: dict
  returned: always
reboot:
  description: A reboot is needed before the firmware offers the VFs (part firmware).
  type: bool
  returned: always
"""

import glob
import os
import re

from ansible.module_utils.basic import AnsibleModule

# Linux's dev_valid_name, no leading '-': the name becomes a sysfs path and an argument.
NETDEV = re.compile(r"^[^-/:\s][^/:\s]{0,14}$")
CM_MODE = "RoCE v2"
MARKER = "/var/run/reboot-required.gpuboot-rdma-vfs"
PARTS = ("firmware", "vfs", "mtu", "netns", "cm")
_MLXCONFIG_ROW = re.compile(r"^\s+(SRIOV_EN|NUM_OF_VFS)\s+(\S+)")


class Rails:
    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.changed = False

    def fail(self, msg):
        self.module.fail_json(msg=msg, changed=self.changed)

    def read(self, path):
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read().strip()
        except OSError as exc:
            self.fail(f"cannot read {path}: {exc.strerror}")

    def write(self, path, value):
        try:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(f"{value}\n")
        except OSError as exc:
            self.fail(f"cannot write {value} to {path}: {exc.strerror}")
        self.changed = True

    def device(self, pf):
        return os.path.join(self.p["sysfs"], "class", "net", pf, "device")

    def pci(self, pf):
        return os.path.basename(os.path.realpath(self.device(pf)))

    def vf_dirs(self, pf):
        found = glob.glob(os.path.join(self.device(pf), "virtfn*"))
        return sorted(found, key=lambda d: int(d.rsplit("virtfn", 1)[1]))

    def vf_names(self, pf, sub):
        """The VFs' netdev (sub=net) or RDMA device (sub=infiniband) names."""
        return [n for d in self.vf_dirs(pf) for n in sorted(os.listdir(os.path.join(d, sub)))]

    def run(self, argv, what):
        rc, out, err = self.module.run_command(argv)
        if rc != 0:
            self.fail(f"{what}: {' '.join(argv)} exited {rc}: {(err or out).strip()[:300]}")
        return out


def firmware(r, pf, want, pending):
    total = int(r.read(os.path.join(r.device(pf), "sriov_totalvfs")) or 0)
    state = {"totalvfs": total, "next_boot": None, "set": False, "reboot": False}
    if total >= want:
        return state
    pci = r.pci(pf)
    mlxconfig = r.module.get_bin_path("mlxconfig", required=True)
    out = r.run([mlxconfig, "-d", pci, "q", "SRIOV_EN", "NUM_OF_VFS"], f"rail {pf}")
    rows = dict(m.groups() for m in map(_MLXCONFIG_ROW.match, out.splitlines()) if m)
    if set(rows) != {"SRIOV_EN", "NUM_OF_VFS"} or not rows["NUM_OF_VFS"].isdigit():
        r.fail(f"rail {pf}: mlxconfig -d {pci} q printed no SRIOV_EN and NUM_OF_VFS rows")
    enabled, count = rows["SRIOV_EN"].startswith("True"), int(rows["NUM_OF_VFS"])
    state["next_boot"] = {"SRIOV_EN": enabled, "NUM_OF_VFS": count}
    state["reboot"] = True
    if not (enabled and count >= want):
        state["set"] = True
        if not r.module.check_mode:
            argv = [
                mlxconfig,
                "-y",
                "-d",
                pci,
                "set",
                "SRIOV_EN=1",
                f"NUM_OF_VFS={max(want, count)}",
            ]
            r.run(argv, f"rail {pf}")
            r.changed = True
    pending.append(f"{pf} ({pci}): NUM_OF_VFS {total} running, {want} wanted")
    return state


def vfs(r, pf, want):
    dev = r.device(pf)
    total = int(r.read(os.path.join(dev, "sriov_totalvfs")) or 0)
    have = int(r.read(os.path.join(dev, "sriov_numvfs")) or 0)
    state = {"numvfs": have, "totalvfs": total, "set": have != want}
    if have == want:
        return state
    if want > total:
        # --check: the firmware part before this one recorded no reboot, but would have
        if os.path.exists(r.p["reboot_marker"]) or r.module.check_mode:
            r.module.warn(f"rail {pf}: {want} VFs wait for the pending reboot ({total} offered)")
            state["set"], state["after_reboot"] = False, True
            return state
        r.fail(f"rail {pf}: the firmware offers {total} VFs, {want} wanted (part firmware first)")
    if r.module.check_mode:
        return state
    if have:
        r.write(os.path.join(dev, "sriov_numvfs"), 0)  # the kernel refuses N -> M directly
    r.write(os.path.join(dev, "sriov_numvfs"), want)
    return state


def settle(r, rails):
    udevadm = r.module.get_bin_path("udevadm", required=True)
    r.run([udevadm, "settle", "--timeout=60"], "waiting for the VFs")
    for pf in rails:
        made = len(r.vf_dirs(pf))
        if made != r.p["vfs"]:
            r.fail(f"rail {pf}: {made} VFs after writing {r.p['vfs']} to sriov_numvfs")


def mtu(r, pf, want):
    names = [pf, *r.vf_names(pf, "net")]
    state = {}
    for name in names:
        path = os.path.join(r.p["sysfs"], "class", "net", name, "mtu")
        have = int(r.read(path) or 0)
        state[name] = have
        if have != want and not r.module.check_mode:
            r.write(path, want)
    return state


def cm(r, pf, tos):
    devs = sorted(os.listdir(os.path.join(r.device(pf), "infiniband")))
    devs += r.vf_names(pf, "infiniband")
    state = {}
    for dev in devs:
        group = os.path.join(r.p["configfs"], "rdma_cm", dev)
        port = os.path.join(group, "ports", "1")
        have = {"mode": None, "tos": None}
        if os.path.isdir(port):
            have = {"mode": r.read(os.path.join(port, "default_roce_mode")),
                    "tos": r.read(os.path.join(port, "default_roce_tos"))}  # fmt: skip
        state[dev] = have
        if have == {"mode": CM_MODE, "tos": str(tos)} or r.module.check_mode:
            continue
        try:
            os.makedirs(group, exist_ok=True)  # configfs makes ports/ with the group
        except OSError as exc:
            r.fail(f"cannot create {group}: {exc.strerror} (is rdma_cm loaded, configfs mounted?)")
        if have["mode"] != CM_MODE:
            r.write(os.path.join(port, "default_roce_mode"), CM_MODE)
        if have["tos"] != str(tos):
            r.write(os.path.join(port, "default_roce_tos"), tos)
    return state


def _lines(items):
    return "".join(f"{k}: {'unknown' if v is None else v}\n" for k, v in items)


def plan(r, part, rails):
    """Per rail (state read, diff entry or None), the part's changes made unless check mode."""
    p, out, pending = r.p, {}, []
    for pf in rails:
        if part == "firmware":
            s = firmware(r, pf, p["vfs"], pending)
            later = f"{p['vfs']} after the reboot" if s["reboot"] else s["totalvfs"]
            wanted = {"SRIOV_EN": True, "NUM_OF_VFS": p["vfs"]} if s["set"] else s["next_boot"]
            before = [("sriov_totalvfs", s["totalvfs"]), ("next boot", s["next_boot"])]
            after = [("sriov_totalvfs", later), ("next boot", wanted)]
            differs = s["set"]
        elif part == "vfs":
            s = vfs(r, pf, p["vfs"])
            later = s.get("after_reboot")
            before = [("sriov_numvfs", s["numvfs"])]
            after = [("sriov_numvfs", f"{p['vfs']} after the reboot" if later else p["vfs"])]
            differs = s["set"] or (later and r.module.check_mode)
        elif part == "mtu":
            s = mtu(r, pf, p["mtu"])
            before, after = list(s.items()), [(k, p["mtu"]) for k in s]
            missing = p["vfs"] - len(s) + 1
            if missing > 0 and r.module.check_mode:  # VFs the VF part would make first
                before.append(("VFs to be made", missing))
                after.append(("VFs to be made", f"{missing} at MTU {p['mtu']}"))
            differs = before != after
        else:
            s = cm(r, pf, p["cm_tos"])
            want = {"mode": CM_MODE, "tos": str(p["cm_tos"])}
            before = [(f"{d} {k}", v) for d, have in s.items() for k, v in have.items()]
            after = [(f"{d} {k}", want[k]) for d in s for k in ("mode", "tos")]
            differs = before != after
        diff = {"before_header": pf, "after_header": pf}
        out[pf] = (
            s,
            {**diff, "before": _lines(before), "after": _lines(after)} if differs else None,
        )
    return out, pending


def netns(r):
    rdma = r.module.get_bin_path("rdma", required=True)
    out = r.run([rdma, "system"], "reading the RDMA namespace mode")
    m = re.search(r"\bnetns (shared|exclusive)\b", out)
    if not m:
        r.fail(f"rdma system printed no namespace mode: {out.strip()[:200]!r}")
    want = r.p["netns"]
    result = {"changed": m.group(1) != want, "netns": m.group(1)}
    if result["changed"]:
        result["diff"] = [{"before": f"netns {m.group(1)}\n", "after": f"netns {want}\n"}]
        if not r.module.check_mode:
            r.run([rdma, "system", "set", "netns", want], "setting the RDMA namespace mode")
    return result


def main():
    module = AnsibleModule(
        argument_spec={
            # its choices checked below, after AnsibleModule has named any unknown option
            "part": {"type": "str", "required": True},
            "interfaces": {"type": "list", "elements": "str", "required": True},
            "vfs": {"type": "int", "default": 0},
            "mtu": {"type": "int", "default": 9000},
            "netns": {"type": "str", "choices": ["shared", "exclusive"], "default": "shared"},
            "cm_tos": {"type": "int", "default": 104},
            "reboot_marker": {"type": "path", "default": MARKER},
            "sysfs": {"type": "path", "default": "/sys"},
            "configfs": {"type": "path", "default": "/sys/kernel/config"},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["part"] not in PARTS:
        module.fail_json(msg=f"part must be one of {', '.join(PARTS)}, got {p['part']!r}")
    bad = [d for d in p["interfaces"] if not NETDEV.match(d) or d in (".", "..")]
    if bad:
        module.fail_json(msg=f"not a network device name: {', '.join(map(repr, bad))}")
    if not (0 <= p["vfs"] <= 1024 and 68 <= p["mtu"] <= 65535 and 0 <= p["cm_tos"] <= 255):
        module.fail_json(
            msg=f"out of range: vfs {p['vfs']} (0-1024), mtu {p['mtu']} (68-65535), "
            f"cm_tos {p['cm_tos']} (0-255)"
        )
    r = Rails(module)
    if p["part"] == "netns":
        result = netns(r)
    else:
        rails, result = p["interfaces"], {"reboot": False}
        states, pending = plan(r, p["part"], rails)
        if (
            p["part"] == "vfs"
            and not module.check_mode
            and any(s["set"] for s, _ in states.values())
        ):
            settle(r, [pf for pf, (s, _) in states.items() if s["set"]])
        result["rails"] = {pf: s for pf, (s, _) in states.items()}
        result["diff"] = [d for _, d in states.values() if d]
        if pending:  # the reboot role reboots once for every role's marker, when allowed
            result["reboot"] = True
            text = "firmware SR-IOV applies at the next boot: " + "; ".join(pending)
            marker = p["reboot_marker"]
            if not os.path.exists(marker) or r.read(marker) != text:
                result["diff"].append({"before_header": marker, "after_header": marker,
                                       "before": "", "after": text + "\n"})  # fmt: skip
                if not module.check_mode:
                    r.write(marker, text)
        result["changed"] = bool(result["diff"])
    if not module._diff:
        result.pop("diff", None)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
