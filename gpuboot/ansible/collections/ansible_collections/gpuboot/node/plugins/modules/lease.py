#!/usr/bin/python
# Copyright: gpuboot; Apache-2.0
"""The node's own lease: one controller converges a node at a time, whichever controller
it is. Each controller's flock (gpuboot/locks.py) lives in its own GPUBOOT_HOME, so two
controllers (two halls, two operators) never saw each other; the lease lives on the node,
where both reach. Stdlib only: a node may run Python 3.9 (EL9)."""

# ruff: noqa: E402  (Ansible reads DOCUMENTATION before the imports)
from __future__ import annotations

DOCUMENTATION = r"""
module: lease
short_description: Take, refresh or release the node's gpuboot lease
description:
  - C(state=held) takes the lease in I(path) for this run, or refreshes it when this run
    holds it already. A lease held by another controller's run that has not expired is
    refused (the task fails naming the holder, its run and its expiry); an expired one is
    taken over, and so is one left by an earlier run of this same controller (its own
    lock on the node proves that run is over).
  - C(state=released) removes the lease when this run holds it; another run's lease is
    left alone, with a warning (this run outlived its lease and another took the node).
  - Read, decide and write happen under an exclusive flock on I(path).lock, and the lease
    is written to a new file renamed over the old one, so two controllers arriving at once
    cannot both take it. Expiry is judged by the node's clock, which both controllers share.
  - The action plugin of the same name fills in the run and the controller (host name and
    a digest of its GPUBOOT_HOME) on the controller.
  - Check mode writes nothing.
options:
  state:
    description: C(held) to take or refresh, C(released) to give back.
    type: str
    choices: [held, released]
    default: held
  path:
    description: The lease file on the node.
    type: path
    default: /var/lib/gpuboot/lease.json
  ttl:
    description: Seconds from now until the lease expires unless refreshed.
    type: int
    default: 3600
author: gpuboot
"""

RETURN = r"""
lease:
  description: The lease as it stands after the task (empty when released).
  type: dict
  returned: always
previous:
  description: The lease that was taken over (expired, or this controller's earlier run).
  type: dict
  returned: when a lease was taken over
"""

import errno
import fcntl
import json
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuboot.node.plugins.module_utils.files import read_file, write_file

# The lock is held for one read and one rename; a holder longer than this is stuck.
LOCK_WAIT_S = 10
_FIELDS = ("run_id", "controller", "taken", "expires")


def _stamp(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def holder_text(lease):
    return (
        f"controller {lease['controller']} (run {lease['run_id']}, "
        f"taken {_stamp(lease['taken'])}, expires {_stamp(lease['expires'])})"
    )


def read_lease(path):
    """The lease in ``path``, None when there is none; ValueError naming what is wrong."""
    text, _ = read_file(path)
    if not text:
        return None
    try:
        lease = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(lease, dict) or any(k not in lease for k in _FIELDS):
        raise ValueError(f"not a lease (needs {', '.join(_FIELDS)})")
    if not all(isinstance(lease[k], str) for k in ("run_id", "controller")) or not all(
        isinstance(lease[k], (int, float)) for k in ("taken", "expires")
    ):
        raise ValueError("a field has the wrong type")
    return lease


def decide(current, run_id, controller, now):
    """(verdict, why) for taking the lease: 'take', 'refresh', 'take over' or 'refuse'."""
    if current is None:
        return "take", "no lease"
    if current["run_id"] == run_id and current["controller"] == controller:
        return "refresh", "this run holds it"
    if current["controller"] == controller:
        return "take over", "left by an earlier run of this controller"
    if current["expires"] <= now:
        return "take over", "expired"
    return "refuse", "held"


def _locked(module, path):
    """An exclusive flock on ``path``.lock, waited for up to LOCK_WAIT_S."""
    os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > deadline:
                os.close(fd)
                module.fail_json(msg=f"cannot lock {path}.lock: {exc}")
            time.sleep(0.05)


def _take(module, path, run_id, controller, ttl):
    try:
        current = read_lease(path)
    except ValueError as exc:
        module.fail_json(
            msg=f"the lease {path} cannot be read: {exc}; no controller can tell who holds "
            f"this node. Once no gpuboot run is converging it, remove {path} on the node"
        )
    now = time.time()
    verdict, why = decide(current, run_id, controller, now)
    if verdict == "refuse":
        module.fail_json(
            msg=f"node held by another gpuboot run: {holder_text(current)}; this run "
            f"({run_id} from {controller}) leaves the node alone. Run again once that run "
            f"ends or its lease expires (at {_stamp(current['expires'])}); if its controller "
            f"is known dead, remove {path} on the node",
            holder=current,
        )
    lease = {
        "run_id": run_id,
        "controller": controller,
        "taken": current["taken"] if verdict == "refresh" else now,
        "expires": now + ttl,
    }
    result = {"changed": True, "lease": lease, "msg": f"{verdict}: {why}"}
    if verdict == "take over":
        result["previous"] = current
        result["msg"] = f"took over the lease of {holder_text(current)}: {why}"
    if not module.check_mode:
        write_file(path, json.dumps(lease, sort_keys=True) + "\n", 0o644)
    return result


def _release(module, path, run_id, controller):
    try:
        current = read_lease(path)
    except ValueError:
        current = {"run_id": "?", "controller": "?"}  # not ours to remove
    if current is None:
        return {"changed": False, "lease": {}, "msg": "no lease held"}
    if (current["run_id"], current["controller"]) != (run_id, controller):
        # this run outlived its lease and another took the node: say so, the operator
        # should know two runs may have overlapped
        module.warn(
            f"this run's lease on the node was taken over by {current['controller']} "
            f"(run {current['run_id']}): check the node with `gpuboot plan`"
        )
        return {
            "changed": False,
            "lease": current,
            "msg": f"the lease is not this run's ({current['run_id']}): left alone",
        }
    if not module.check_mode:
        os.unlink(path)
    return {"changed": True, "lease": {}, "msg": "released"}


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["held", "released"], "default": "held"},
            "path": {"type": "path", "default": "/var/lib/gpuboot/lease.json"},
            "ttl": {"type": "int", "default": 3600},
            "run_id": {"type": "str", "required": True},
            "controller": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    state, path, ttl, run_id, controller = (
        module.params[k] for k in ("state", "path", "ttl", "run_id", "controller")
    )
    if not os.path.isabs(path):
        module.fail_json(msg=f"path {path!r} is not absolute")
    if ttl <= 0:
        module.fail_json(msg=f"ttl {ttl} is not a positive number of seconds")
    fd = _locked(module, path)
    try:
        if state == "held":
            result = _take(module, path, run_id, controller, ttl)
        else:
            result = _release(module, path, run_id, controller)
    finally:
        os.close(fd)  # closing the descriptor drops the flock
    module.exit_json(**result)


if __name__ == "__main__":
    main()
