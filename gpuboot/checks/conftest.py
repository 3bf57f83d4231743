"""Fixtures for the pytest-testinfra checks (molecule's verifier, an operator's own
`pytest --hosts ... gpuboot/checks`): every host's evidence collected once, in parallel,
by the engine's own collection (gpuboot/engine.py), judged by the same rules.

`gpuboot certify` does not run these files: it calls the engine directly.
"""

from __future__ import annotations

import pytest

from gpuboot.engine import collect_nodes
from gpuboot.node_collect import HostUnreachable, NodeEvidence, collect_node


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--gpuboot-probes", default=None, help="probe level none|quick|full (default: host var)"
    )


def _name(host) -> str:
    return host.backend.get_hostname()


def _hostvars(host) -> dict:
    """The host's inventory variables (testinfra's ansible backend), else none."""
    return host.ansible.get_variables() if host.backend.NAME == "ansible" else {}


@pytest.fixture(scope="session")
def _evidence_store(request: pytest.FixtureRequest) -> dict:
    """Collect every host's evidence at once (one SSH round trip per host, in parallel)."""
    targets = {}
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if callspec and "_testinfra_host" in callspec.params:
            h = callspec.params["_testinfra_host"]
            targets[_name(h)] = (h, _hostvars(h))
    return collect_nodes(targets, request.config.getoption("--gpuboot-probes"))


@pytest.fixture(scope="module")
def node(host, _evidence_store) -> dict:
    """This host's evidence and variables; raises (ERROR) when they could not be had."""
    from gpuboot.checks.rules import NodeContext

    entry = _evidence_store.get(_name(host))
    if entry is None:
        entry = collect_node(_name(host), host, _hostvars(host))
    if not isinstance(entry, NodeEvidence):
        raise entry
    if entry.profile is None:
        raise HostUnreachable("host has no gpuboot_profile", where=_name(host))
    return {
        "evidence": entry.evidence,
        "ctx": NodeContext(
            host=_name(host), profile=entry.profile, hostvars=entry.hostvars, meta=entry.meta
        ),
    }
