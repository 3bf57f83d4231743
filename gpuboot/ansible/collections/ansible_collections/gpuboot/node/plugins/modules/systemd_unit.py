#!/usr/bin/python
# Copyright: gpuboot; Apache-2.0
"""A unit file of gpuboot's own, written and enabled at boot in one module run: a managed
file, then ansible.builtin.systemd_service, took two runs and a check-mode exception (a unit
the file task would write is no unit yet)."""

# ruff: noqa: E402  (Ansible reads DOCUMENTATION before the imports)
from __future__ import annotations

DOCUMENTATION = r"""
module: systemd_unit
short_description: Write a systemd unit file of gpuboot's own and enable it at boot
description:
  - Writes I(content) to I(directory)/I(name) as gpuboot.node.managed_file does (whole or not
    at all, mode 0644, owned by root), reloads systemd when the file changed, and enables the
    unit when systemctl is-enabled does not say enabled (enabled-runtime lasts until the
    next boot only, so it is enabled again).
  - It does not start the unit; a boot unit of gpuboot's runs at the next boot, and the role
    applies the same settings now in a task of its own.
  - Check mode writes nothing and runs no systemctl command that changes anything. A unit
    whose file the run would write for the first time counts as to be enabled.
  - A masked unit (masked or masked-runtime) fails in both modes before anything is written;
    gpuboot does not unmask what an operator masked.
options:
  name:
    description: The unit's file name, e.g. C(gpuboot-roce-qos.service).
    type: str
    required: true
  content:
    description: The whole text of the unit file.
    type: str
    required: true
  directory:
    description: Where the unit file lives.
    type: path
    default: /etc/systemd/system
author: gpuboot
"""

RETURN = r"""
path:
  description: The unit file.
  type: str
  returned: always
enabled_before:
  description: What systemctl is-enabled said before the run (empty when the unit was new).
  type: str
  returned: always
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuboot.node.plugins.module_utils.files import ensure_file, read_file

UNIT_NAME = re.compile(r"[A-Za-z0-9:_.@-]+\.(service|socket|timer|target|path|mount)")


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "content": {"type": "str", "required": True},
            "directory": {"type": "path", "default": "/etc/systemd/system"},
        },
        supports_check_mode=True,
    )
    name, text, directory = (module.params[k] for k in ("name", "content", "directory"))
    if not UNIT_NAME.fullmatch(name):
        module.fail_json(msg=f"{name!r} is not a unit file name such as gpuboot-x.service")
    if not os.path.isabs(directory):
        module.fail_json(msg=f"directory {directory!r} is not absolute")
    path = os.path.join(directory, name)
    if os.path.isdir(path):
        module.fail_json(msg=f"{path} is a directory")
    check = module.check_mode
    systemctl = module.get_bin_path("systemctl", required=True)

    def run(*argv, ok=(0,)):
        rc, out, err = module.run_command([systemctl, *argv])
        if rc not in ok:
            module.fail_json(msg=f"systemctl {' '.join(argv)} failed: {(err or out).strip()}")
        return out.strip().splitlines()[0] if out.strip() else ""

    # is-enabled exits non-zero for disabled, masked and unknown units alike: its word counts.
    # Asked before anything is written: a unit an operator masked stays masked, in --check too.
    was = run("is-enabled", name, ok=range(256))
    if was.startswith("masked"):
        module.fail_json(
            msg=f"{name} is {was}: gpuboot does not unmask a unit; "
            f"run systemctl unmask {name} if it should run at boot"
        )
    before = read_file(path)
    file_changed = ensure_file(path, text, check, 0o644, before)
    now = was
    if file_changed and not check:
        run("daemon-reload")
        now = run("is-enabled", name, ok=range(256))  # the new [Install] section decides
    enable = now != "enabled"
    if enable and not check:
        run("enable", name)
    changed = file_changed or enable
    result = {"changed": changed, "path": path, "enabled_before": was}
    if changed and module._diff:
        diffs = []
        if file_changed:
            diffs.append(
                {"before_header": path, "after_header": path, "before": before[0], "after": text}
            )
        if enable:
            header = f"systemctl is-enabled {name}"
            diffs.append(
                {
                    "before_header": header,
                    "after_header": header,
                    "before": f"{was}\n" if was else "",
                    "after": "enabled\n",
                }
            )
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
