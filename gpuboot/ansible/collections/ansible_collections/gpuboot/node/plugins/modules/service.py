#!/usr/bin/python
# Copyright: gpuboot; Apache-2.0
"""A package's systemd unit enabled at boot and started (or restarted) now, read in one
systemctl call. ansible.builtin.systemd_service fails in check mode on a unit whose package
the same run would install, which every role let pass with its own failed_when; here that
case is an argument (provided_now), and the answer is a few words, not the unit's whole
property dump (8-10 KB per task and node in the run's events)."""

# ruff: noqa: E402  (Ansible reads DOCUMENTATION before the imports)
from __future__ import annotations

DOCUMENTATION = r"""
module: service
short_description: Enable a package's systemd unit and start or restart it
description:
  - Reads the unit's load, unit-file and active states with one systemctl show, then enables
    it unless systemctl counts it as enabled (enabled, enabled-runtime, static, indirect,
    alias, generated or transient, as systemctl is-enabled exits 0 for), and starts it unless
    it is active or activating, or restarts it.
  - A unit that does not exist fails, naming the unit, unless the run is in check mode and
    I(provided_now) says an earlier task of this run installs the package that brings it;
    then it is a change (enable and start), not a failure.
  - A masked unit fails; gpuboot does not unmask what an operator masked.
  - Check mode runs no systemctl command that changes anything.
options:
  name:
    description: The unit, e.g. C(nvidia-persistenced) or C(openibd.service).
    type: str
    required: true
  state:
    description:
      - C(started) starts it when it is not running, C(restarted) restarts it, C(enabled)
        only enables it for the next boot.
    type: str
    choices: [started, restarted, enabled]
    default: started
  provided_now:
    description: An earlier task of this run installs the unit's package (or would, in check mode).
    type: bool
    default: false
author: gpuboot
"""

RETURN = r"""
name:
  description: The unit.
  type: str
  returned: always
actions:
  description: What the run did (or would do), in order, e.g. C([enable, start]).
  type: list
  elements: str
  returned: always
unit_missing:
  description: True in check mode when the unit comes with a package this run installs.
  type: bool
  returned: always
"""

import re

from ansible.module_utils.basic import AnsibleModule

UNIT_NAME = re.compile(r"[A-Za-z0-9:_.@-]+")
# The unit-file states systemctl is-enabled exits 0 for (systemctl(1)).
ENABLED = {"enabled", "enabled-runtime", "static", "indirect", "alias", "generated", "transient"}
RUNNING = {"active", "activating", "reloading"}


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "state": {
                "type": "str",
                "choices": ["started", "restarted", "enabled"],
                "default": "started",
            },
            "provided_now": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    name, state = module.params["name"], module.params["state"]
    if not UNIT_NAME.fullmatch(name) or name.startswith("-"):
        module.fail_json(msg=f"{name!r} is not a systemd unit name")
    systemctl = module.get_bin_path("systemctl", required=True)

    def run(*argv):
        rc, out, err = module.run_command([systemctl, *argv])
        if rc != 0:
            detail = (err or out).strip() or f"exit {rc}"
            module.fail_json(
                msg=f"systemctl {' '.join(argv)} failed: {detail}",
                hint=f"journalctl -u {name} on the node says why",
            )
        return out

    shown = run("show", "--property=LoadState,UnitFileState,ActiveState", "--", name)
    props = dict(line.partition("=")[::2] for line in shown.splitlines())
    load = props.get("LoadState", "")
    if load == "not-found":
        if module.check_mode and module.params["provided_now"]:
            now = {"started": ["start"], "restarted": ["restart"]}.get(state, [])
            module.exit_json(changed=True, name=name, actions=["enable", *now], unit_missing=True)
        module.fail_json(msg=f"no unit {name} on the node (is its package installed?)")
    if load == "masked":
        module.fail_json(msg=f"unit {name} is masked: unmask it or leave it out of the stack")
    if load != "loaded":
        module.fail_json(msg=f"unit {name} did not load (LoadState={load or 'unknown'})")
    actions = []
    if props.get("UnitFileState") not in ENABLED:
        actions.append("enable")
    if state == "restarted":
        actions.append("restart")
    elif state == "started" and props.get("ActiveState") not in RUNNING:
        actions.append("start")
    if not module.check_mode:
        for action in actions:
            run(action, "--", name)
    module.exit_json(changed=bool(actions), name=name, actions=actions, unit_missing=False)


if __name__ == "__main__":
    main()
