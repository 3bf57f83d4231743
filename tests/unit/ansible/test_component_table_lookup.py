"""A play run without gpuboot's CLI (molecule's default scenario, an operator's own
ansible-playbook) gets the component table's columns from the collection's lookup: the
same values gpuboot's derivation hands every host, and no role keeps a copy."""

from __future__ import annotations

import importlib.util
import re

import pytest
from ansible.errors import AnsibleLookupError

from gpuboot import paths
from gpuboot.stacks import table_vars

PLUGIN = (
    paths.ROLES_DIR.parent
    / "collections/ansible_collections/gpuboot/node/plugins/lookup/component_table.py"
)


@pytest.fixture(scope="module")
def lookup():
    spec = importlib.util.spec_from_file_location("component_table", PLUGIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.LookupModule()


@pytest.mark.parametrize("family", ["debian", "redhat"])
def test_the_lookup_gives_what_gpuboot_derives(lookup, family):
    columns = table_vars(family)
    got = lookup.run(sorted(columns), variables={"gpuboot_os_family": family})
    assert got == [columns[k] for k in sorted(columns)]
    assert lookup.run(["nvidia_driver_modules"])[0][0] == "nvidia"  # debian by default


def test_a_name_the_table_does_not_give_is_an_error(lookup):
    with pytest.raises(AnsibleLookupError, match="no nvidia_driver_pins"):
        lookup.run(["nvidia_driver_pins"], variables={})


def test_every_role_default_of_a_table_column_comes_from_the_lookup():
    columns = set(table_vars("debian"))
    defaults = {}
    for path in paths.ROLES_DIR.glob("*/defaults/main.yml"):
        for name, value in re.findall(r"^(\w+): (.*)$", path.read_text(), re.M):
            defaults[name] = value
    named = sorted(columns & set(defaults))
    assert named, "no role default names a table column"
    for name in named:
        assert f"component_table', '{name}')" in defaults[name], (name, defaults[name])
