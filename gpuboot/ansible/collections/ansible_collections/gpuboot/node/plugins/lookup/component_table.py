"""The component table's columns for a role, read where the play runs on the controller.

gpuboot install hands every host these variables from its one derivation; a play run
without it (molecule's default scenario, an operator's own ansible-playbook) takes them
from the same table through this lookup, so no role keeps a copy of its patterns, kernel
modules or units."""

from __future__ import annotations

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

DOCUMENTATION = r"""
name: component_table
short_description: A role variable that gpuboot/components.yaml's columns give
description:
  - Returns the value of C(<prefix>_supersede), C(<prefix>_modules) or C(<prefix>_services)
    for the host's OS family (C(gpuboot_os_family), default debian), as gpuboot derives it.
options:
  _terms:
    description: The variable's name, e.g. nvidia_driver_modules.
    required: true
"""


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        from gpuboot.stacks import table_vars  # the controller's gpuboot, which ships this

        family = (variables or {}).get("gpuboot_os_family", "debian")
        if self._templar is not None:  # an inventory may template it
            family = self._templar.template(family)
        columns = table_vars(str(family))
        missing = [t for t in terms if t not in columns]
        if missing:
            raise AnsibleLookupError(f"gpuboot/components.yaml gives no {', '.join(missing)}")
        return [columns[t] for t in terms]
