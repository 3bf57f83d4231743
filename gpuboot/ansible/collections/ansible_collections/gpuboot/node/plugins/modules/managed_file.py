#!/usr/bin/python
# Copyright: gpuboot; Apache-2.0
"""A whole file from the given text, in one module run (ansible.builtin.copy takes a stat,
a file transfer, a copy run and two temp-dir commands: 2.5 times a module run's controller
CPU, measured)."""

# ruff: noqa: E402  (Ansible reads DOCUMENTATION before the imports)
from __future__ import annotations

DOCUMENTATION = r"""
module: managed_file
short_description: Make a file hold exactly the given text, in one module run
description:
  - Writes I(content) to I(path) when the file is missing or differs in text, mode or owner,
    as a new file in the same directory renamed over the old one, so a crash or a full disk
    leaves the old file whole. The file belongs to the user the module runs as (root).
  - The text travels in the module's arguments (no file transfer, no temp directory), so
    it suits gpuboot's own small files (configuration, units, armored keys, markers), not for large
    or binary ones.
  - Check mode writes nothing; C(changed) and, with --diff, the diff say what a run would do.
options:
  path:
    description: Absolute path of the file on the node.
    type: path
    required: true
  content:
    description: The whole text of the file (UTF-8).
    type: str
    required: true
  mode:
    description: Octal permissions, e.g. C("0644") or C("0755").
    type: str
    default: "0644"
author: gpuboot
"""

RETURN = r"""
path:
  description: The file.
  type: str
  returned: always
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuboot.node.plugins.module_utils.files import ensure_file, read_file


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "content": {"type": "str", "required": True},
            "mode": {"type": "str", "default": "0644"},
        },
        supports_check_mode=True,
    )
    path, text, mode = (module.params[k] for k in ("path", "content", "mode"))
    if not os.path.isabs(path):
        module.fail_json(msg=f"path {path!r} is not absolute")
    if not re.fullmatch(r"0?[0-7]{3}", mode):
        module.fail_json(msg=f"mode {mode!r} is not octal permissions such as 0644")
    if os.path.isdir(path):
        module.fail_json(msg=f"{path} is a directory")
    before = read_file(path)
    changed = ensure_file(path, text, module.check_mode, int(mode, 8), before)
    result = {"changed": changed, "path": path}
    if changed and module._diff:
        old, new = before[0], text
        if old == new:  # only the mode or the owner differs: say that, not an empty diff
            old = f"mode {before[1]:04o}\n" if before[1] is not None else ""
            new = f"mode {int(mode, 8):04o}, owner {os.geteuid()}\n"
        result["diff"] = {"before_header": path, "after_header": path, "before": old, "after": new}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
