# Copyright: gpuboot; Apache-2.0
"""INST-003: every role's variables checked against its meta/argument_specs.yml before
anything changes, with Ansible's own validator (the one rolespec_validate and
ansible.builtin.validate_argument_spec use), on the controller, in one task per node.

A loop of validate_argument_spec over the 16 entry points cost 0.1-0.2 s of controller CPU
per node in a first converge (that task alone, 20 local hosts: 5.3-6.0 s, now 1.4-1.6 s):
each item templated its spec through a file lookup and from_yaml, and paid the loop's
per-item overhead. Here the spec files are read directly, the variables are templated in
one call, and every broken variable of every role is reported at once."""

from __future__ import annotations

import os

import yaml
from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

ARGUMENT_SPEC = {
    "roles_path": {"type": "path", "required": True},
    "entry_points": {"type": "list", "elements": "list", "required": True},
}
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _options(roles_path: str, role: str, entry: str) -> dict:
    """The entry point's options (a spec file is gpuboot's own, shipped with its role); an
    entry point that declares none takes none, as Ansible reads it."""
    path = os.path.join(roles_path, role, "meta", "argument_specs.yml")
    try:
        with open(path, encoding="utf-8") as fh:
            specs = yaml.load(fh, Loader=LOADER)["argument_specs"]
        return specs[entry].get("options") or {}
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError) as exc:
        msg = f"no argument spec for role {role} ({entry}) in {path}: {exc}"
        raise AnsibleActionFail(msg) from exc


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        specs = []
        for entry_point in args["entry_points"]:
            if len(entry_point) != 2:
                raise AnsibleActionFail(f"entry point {entry_point!r} is not [role, entry]")
            role, entry = (str(part) for part in entry_point)
            specs.append((f"{role} ({entry})", _options(args["roles_path"], role, entry)))
        names = {name for _, options in specs for name in options if name in task_vars}
        values = self._templar.template({name: task_vars[name] for name in names})
        errors = []
        for label, options in specs:
            provided = {name: values[name] for name in options if name in values}
            checked = ArgumentSpecValidator(options).validate(
                provided, validate_role_argument_spec=True
            )
            errors.extend(f"{label}: {message}" for message in checked.error_messages)
        result.update(changed=False, checked=[label for label, _ in specs])
        if errors:
            result.update(
                failed=True,
                msg="Validation of role arguments failed:\n" + "\n".join(errors),
                argument_errors=errors,
            )
        else:
            result["msg"] = f"the variables of {len(specs)} role entry points are valid"
        return result
