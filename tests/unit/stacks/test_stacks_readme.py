"""gpuboot/stacks/README.md says which OS families gpuboot converges: the ones the
inventory accepts (gpuboot.inventory.hosts.NODE_OS_FAMILIES), no fewer."""

from __future__ import annotations

import re

from gpuboot.inventory.hosts import NODE_OS_FAMILIES


def _readme() -> str:
    from pathlib import Path

    import gpuboot

    return (Path(gpuboot.__file__).parent / "stacks" / "README.md").read_text()


def test_the_readme_names_every_family_the_inventory_accepts_as_converged():
    text = " ".join(_readme().split())
    said = re.search(r"gpuboot converges and certifies nodes of [^:.]*", text)
    assert said, "the README no longer says which OS families gpuboot converges"
    for family in NODE_OS_FAMILIES:
        assert f"`{family}`" in said[0], (family, said[0])


def test_the_readme_does_not_say_a_supported_family_is_refused():
    text = " ".join(_readme().split())
    for family in NODE_OS_FAMILIES:
        assert not re.search(rf"`gpuboot_os_family: {family}` is refused", text), family
        assert f"converges and certifies `{family}` nodes only" not in text, family
