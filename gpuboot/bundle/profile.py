"""A host's SKU profile as its bundle names it: a file of the host directory (a SKU
variant, untrusted YAML) or a shipped profile by name; never a path elsewhere."""

from __future__ import annotations

from typing import Any

import yaml

from gpuboot.bundle.model import MAX_PROFILE_BYTES, BundleError
from gpuboot.bundle.names import META
from gpuboot.profiles import list_profiles, load_profile
from gpuboot.profiles import validate as validate_profile


class _NoAliasLoader(yaml.SafeLoader):
    """A bundle's own profile is untrusted YAML: no aliases (no alias bomb)."""

    def compose_node(self, parent, index):  # type: ignore[no-untyped-def]
        if self.check_event(yaml.events.AliasEvent):
            raise yaml.YAMLError("YAML aliases are not accepted in a bundle's profile")
        return super().compose_node(parent, index)


# Shipped profiles read in this evaluate run (evaluate clears it per run; forked workers
# inherit it): one copy per name, shared read-only like --profile's.
SHIPPED: dict[str, dict[str, Any]] = {}


def bundle_profile(host: str, meta: dict[str, Any], files: dict[str, bytes]) -> dict[str, Any]:
    """meta.json's profile: a file of this host directory (a SKU variant) or a shipped
    profile by name; never a path elsewhere on the controller."""
    name = meta.get("profile")
    hint = "pass --profile SKU"
    if not name or not isinstance(name, str):
        raise BundleError("no profile recorded for this host in meta.json", hint=hint)
    if name in files and name != META:
        where = f"{host}/{name}"
        if len(files[name]) > MAX_PROFILE_BYTES:
            raise BundleError(f"profile {where} over {MAX_PROFILE_BYTES} bytes", hint=hint)
        try:
            data = yaml.load(files[name], Loader=_NoAliasLoader)  # a SafeLoader
        except (yaml.YAMLError, RecursionError, ValueError) as exc:
            raise BundleError(f"profile {where} is not valid YAML ({exc})", hint=hint) from None
        return validate_profile(data, where)
    if name in list_profiles():
        if name not in SHIPPED:
            SHIPPED[name] = load_profile(name)
        return SHIPPED[name]
    raise BundleError(
        f"profile {name!r} is neither a file in this host directory nor a shipped profile",
        hint=hint,
    )
