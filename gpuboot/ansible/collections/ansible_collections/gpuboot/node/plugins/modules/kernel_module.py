#!/usr/bin/python
# Copyright: gpuboot; Apache-2.0
"""The installed kernel module against the loaded one: load it, or say a reboot must."""

# ruff: noqa: E402  (Ansible reads DOCUMENTATION before the imports)
from __future__ import annotations

DOCUMENTATION = r"""
module: kernel_module
short_description: Load a kernel module, or record that only a reboot can load its version
description:
  - Compares the installed module's version (C(modinfo -F version), or the one given) with
    the loaded one (C(<sysfs>/module/<name>/version)).
  - Not loaded, it runs C(modprobe) (I(unloaded=load)); loaded at another version, it
    cannot be swapped under running GPUs or RDMA traffic, so it reports C(reboot_needed)
    and writes I(reboot_marker) for the reboot step.
  - A module built for a driver that changes only at the next boot (I(requires) loaded at
    another version than installed) is not loaded now either; a reboot is needed.
  - With I(at_boot) it also lists itself in C(<modules_load_d>/gpuboot-<name>.conf) (C(_) as
    C(-)), whatever happens now, so systemd-modules-load loads it at every boot, the next
    one included. Check mode writes nothing; C(changed) and the diff show the file.
  - With I(restart_unit) a module that only a reboot could swap gets one restart of that
    unit first (DOCA's openibd reloads the whole RDMA stack); a reboot is needed (and the
    marker written) only when the installed version is still not the loaded one after it.
options:
  name:
    description: The kernel module.
    type: str
    required: true
  version:
    description: The version that should run (default the installed module's, from modinfo).
    type: str
  sysfs:
    description: Where sysfs is mounted as the node sees it (the lab's emulated kernel has its own).
    type: path
    default: /sys
  unloaded:
    description: What a module that is not loaded needs.
    type: str
    choices: [load, reboot, nothing]
    default: load
  reload:
    description: Unload and load it again when it is loaded at the right version (its
      dependencies changed under it, e.g. ib_core after an OFED change).
    type: bool
    default: false
  requires:
    description: A module this one is built against; when it waits for a reboot, so does this one.
    type: str
  reboot_marker:
    description: File written when a reboot is needed (C(<name> <loaded> loaded, <ver> installed)).
    type: path
  at_boot:
    description: Keep the module loaded at every boot (its modules-load.d file, mode 0644).
    type: bool
    default: false
  modules_load_d:
    description: The directory systemd-modules-load reads.
    type: path
    default: /etc/modules-load.d
  owner:
    description: Who manages the boot file, named in its comment (e.g. C(role nvidia_gds)).
    type: str
    default: gpuboot
  restart_unit:
    description: A systemd unit whose restart loads the installed version (e.g. C(openibd)).
    type: str
author: gpuboot
"""

RETURN = r"""
installed:
  description: The version that should run ('' when the module is not installed).
  type: str
  returned: always
loaded:
  description: The loaded version ('' when not loaded), as read before any change.
  type: str
  returned: always
reboot_needed:
  description: Only a reboot brings the installed version up.
  type: bool
  returned: always
action:
  description: What ran now ('', C(load), C(reload) or C(restart)).
  type: str
  returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuboot.node.plugins.module_utils.files import ensure_file, read_file


class KernelModules:
    """modinfo and modprobe by argv, the loaded version from sysfs."""

    def __init__(self, module, sysfs):
        self.module = module
        self.sysfs = sysfs

    def installed(self, name):
        rc, out, _ = self.module.run_command(["modinfo", "-F", "version", name])
        lines = out.splitlines()
        return lines[0].strip() if rc == 0 and lines else ""

    def loaded(self, name):
        try:
            with open(os.path.join(self.sysfs, "module", name, "version"), encoding="utf-8") as fh:
                return fh.read().strip()
        except FileNotFoundError:
            return ""

    def modprobe(self, *argv):
        rc, out, err = self.module.run_command(["modprobe", *argv])
        if rc != 0:
            self.module.fail_json(
                msg=f"modprobe {' '.join(argv)} exited {rc}: {(err or out).strip()}"
            )


def decide(p, installed, loaded, requires_pending):
    """(action, reboot_needed): action is '', 'load' or 'reload'."""
    if not installed:
        return "", False
    if not loaded:
        if requires_pending:
            return "", True
        return ("load", False) if p["unloaded"] == "load" else ("", p["unloaded"] == "reboot")
    if loaded != installed:
        return "", True
    return ("reload", False) if p["reload"] and not requires_pending else ("", False)


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "version": {"type": "str"},
            "sysfs": {"type": "path", "default": "/sys"},
            "unloaded": {
                "type": "str",
                "choices": ["load", "reboot", "nothing"],
                "default": "load",
            },
            "reload": {"type": "bool", "default": False},
            "requires": {"type": "str"},
            "reboot_marker": {"type": "path"},
            "at_boot": {"type": "bool", "default": False},
            "modules_load_d": {"type": "path", "default": "/etc/modules-load.d"},
            "owner": {"type": "str", "default": "gpuboot"},
            "restart_unit": {"type": "str"},
        },
        supports_check_mode=True,
    )
    p = module.params
    kmods = KernelModules(module, p["sysfs"])
    name = p["name"]
    installed = kmods.installed(name) if p["version"] is None else p["version"]
    loaded = kmods.loaded(name)
    pending = False
    if p["requires"]:
        req_loaded = kmods.loaded(p["requires"])
        pending = bool(req_loaded) and kmods.installed(p["requires"]) != req_loaded
    action, reboot = decide(p, installed, loaded, pending)
    changed = bool(action)
    result = {}
    if p["at_boot"]:  # first: a load that fails still leaves the boot listing right
        path = os.path.join(p["modules_load_d"], f"gpuboot-{name.replace('_', '-')}.conf")
        text = f"# Managed by gpuboot ({p['owner']}).\n{name}\n"
        before = read_file(path)
        if ensure_file(path, text, module.check_mode, before=before):
            changed = True
            if module._diff:
                result["diff"] = [{"before_header": path, "before": before[0], "after": text}]
    if reboot and installed and p["restart_unit"]:
        action, changed = "restart", True
        if not module.check_mode:  # --check: the mismatch stands, as the restart would find it
            argv = ["systemctl", "restart", p["restart_unit"]]
            rc, out, err = module.run_command(argv)
            if rc != 0:
                module.fail_json(msg=f"{' '.join(argv)} exited {rc}: {(err or out).strip()}")
            reboot = kmods.loaded(name) != installed
    elif action and not module.check_mode:
        if action == "reload":
            kmods.modprobe("-r", name)
        kmods.modprobe(name)
        if kmods.loaded(name) not in ("", installed):  # modprobe found another build
            reboot = True
    if result and (action or reboot):  # the file's diff hides the module's line: show both
        now = f"{installed} after a reboot" if reboot else f"{installed} loaded"
        result["diff"].append(
            {
                "before_header": f"kernel module {name}",
                "before": f"{loaded or 'not'} loaded\n",
                "after": f"{now}\n",
            }
        )
    if reboot and p["reboot_marker"]:
        text = f"{name} {loaded or 'not'} loaded, {installed} installed\n"
        changed = ensure_file(p["reboot_marker"], text, module.check_mode) or changed
    module.exit_json(
        changed=changed,
        installed=installed,
        loaded=loaded,
        reboot_needed=reboot,
        action=action,
        **result,
    )


if __name__ == "__main__":
    main()
