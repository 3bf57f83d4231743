#!/usr/bin/python
# Copyright: gpuboot; Apache-2.0
"""Documentation only: the work is the action plugin of the same name, on the controller."""

DOCUMENTATION = r"""
module: role_arguments
short_description: Check a host's variables against the argument specs of several roles
description:
  - For each role entry point, reads the role's meta/argument_specs.yml and checks the
    host's variables that the entry point declares with Ansible's own validator (as
    rolespec_validate and ansible.builtin.validate_argument_spec do), after templating them.
  - Every broken variable of every role is reported at once, each with its role and entry
    point, before any task changes anything.
  - Runs on the controller only; it never connects to the host.
options:
  roles_path:
    description: The directory that holds the roles.
    type: path
    required: true
  entry_points:
    description:
      - The role entry points to check, each a list of role and entry point,
        e.g. C([nvidia_driver, main]).
    type: list
    elements: list
    required: true
attributes:
  check_mode:
    support: full
  action:
    support: full
author: gpuboot
"""

RETURN = r"""
checked:
  description: The entry points checked, e.g. C(nvidia_driver (main)).
  type: list
  elements: str
  returned: always
argument_errors:
  description: One line per broken variable, each starting with its role and entry point.
  type: list
  elements: str
  returned: failure
"""
