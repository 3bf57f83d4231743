# Copyright: gpuboot; Apache-2.0
"""gpuboot.node.raw_answer: a command on the node, its answer returned once (collect.yml's
and so certify's, scan's and plan's reads through an executor).

It runs the command through the connection as ansible.builtin.raw does (no Python on the
node, no shell wrapped around it), but returns only rc, stdout and stderr: raw adds
stdout_lines and stderr_lines, the whole answer a second time in the host's event, which
the executor streams and the controller parses byte by byte. A non-zero rc is reported,
never a failure: the collection's own end line carries its exit code to the controller.
The task's ``timeout`` keyword bounds it, as any task. An action plugin of the collection
(no module: nothing of it runs on the node), so any play finds it wherever it lies, on the
executor as on the controller."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

ARGUMENT_SPEC = {"cmd": {"type": "str", "required": True}}
KEPT = ("rc", "stdout", "stderr")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars or {})
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        # executable=False: the command as given, like raw (no `sh -c ... ; sleep 0`)
        answer = self._low_level_execute_command(args["cmd"], executable=False)
        result.update({key: answer[key] for key in KEPT})
        # said, or Ansible fails a result whose rc is not 0 (a task's failed_when still may)
        result.update(changed=False, failed=False)
        return result
