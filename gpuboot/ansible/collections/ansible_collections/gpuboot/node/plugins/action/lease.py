# Copyright: gpuboot; Apache-2.0
"""gpuboot.node.lease on the controller: who is asking (this gpuboot run and this
controller), then the module on the node takes or refuses the lease atomically.

The controller is its host name and a digest of its GPUBOOT_HOME: two operators' homes on
one machine are two controllers (each keeps its own locks, so neither sees the other's),
and the digest names a home without printing its path into every node."""

from __future__ import annotations

import hashlib
import os
import re
import socket
from pathlib import Path

from ansible.plugins.action import ActionBase

ARGUMENT_SPEC = {
    "state": {"type": "str", "choices": ["held", "released"], "default": "held"},
    "path": {"type": "path", "default": "/var/lib/gpuboot/lease.json"},
    "ttl": {"type": "int", "default": 3600},
}
# gpuboot.runner names a run directory <time>-<verb>-<6 hex> and points Ansible's local
# temp into it (a batch's run is a directory below it): the run id an operator finds in
# `gpuboot runs list`.
_RUN_DIR = re.compile(r"^\d{8}T\d{6}-[a-z-]+-[0-9a-f]{6}$")


def run_id(env=os.environ) -> str:
    for part in reversed(Path(env.get("ANSIBLE_LOCAL_TEMP", "")).parts):
        if _RUN_DIR.match(part):
            return part
    # a playbook run by hand, outside gpuboot: the ansible-playbook process is the run
    return f"ansible-playbook pid {os.getppid()}"


def controller() -> str:
    from gpuboot import paths  # the controller's gpuboot, which ships this collection

    home = str(paths.home())
    return f"{socket.gethostname()} home {hashlib.sha256(home.encode()).hexdigest()[:12]}"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        module_args = {**args, "run_id": run_id(), "controller": controller()}
        result.update(
            self._execute_module(
                module_name="gpuboot.node.lease", module_args=module_args, task_vars=task_vars
            )
        )
        return result
