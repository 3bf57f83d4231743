"""Fixtures for the pytest-testinfra checks (molecule's verifier, an operator's own
`pytest --ansible-inventory INV [--hosts PATTERN] gpuboot/checks`): the inventory loaded and
checked once by gpuboot (gpuboot.inventory), each host reached through certify's transport
(gpuboot.transport) with its derived variables, every host's evidence collected once, in
parallel, by the engine's own collection, judged by the same rules.

testinfra's own reading of the inventory (`ansible-inventory --list`, its host list and
variables) is not used: it would be a second, unchecked reading of the same file.
`gpuboot certify` does not run these files: it calls the engine directly.
"""

from __future__ import annotations

import pytest

from gpuboot.engine import collect_nodes
from gpuboot.inventory import Inventory, load_inventory, select_hosts
from gpuboot.node_collect import NodeEvidence

_INVENTORY = pytest.StashKey[Inventory]()
_HOSTS = pytest.StashKey[list[str]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--gpuboot-probes", default=None, help="probe level none|quick|full (default: host var)"
    )


def _selected(config: pytest.Config) -> tuple[Inventory, list[str]]:
    """The checked inventory testinfra's --ansible-inventory names, loaded once per
    session, and the hosts its --hosts selects (Ansible's pattern rules; all without)."""
    if _INVENTORY not in config.stash:
        path = config.getoption("ansible_inventory", None)
        if not path:
            raise pytest.UsageError(
                "gpuboot's checks read their hosts from an Ansible inventory: pass "
                "--ansible-inventory INV (molecule's verifier does)"
            )
        inv = load_inventory(path)
        specs = [s for s in (config.getoption("hosts", None) or "").split(",") if s]
        other = [s for s in specs if "://" in s and not s.startswith("ansible://")]
        if other:
            raise pytest.UsageError(
                f"--hosts {other[0]}: gpuboot's checks reach inventory hosts only "
                "(name them, or ansible://NAME)"
            )
        pattern = ",".join(s.removeprefix("ansible://") for s in specs)
        config.stash[_INVENTORY] = inv
        config.stash[_HOSTS] = select_hosts(inv, pattern or None)
    return config.stash[_INVENTORY], config.stash[_HOSTS]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One test per rule and selected host; ids as testinfra's (``ansible://NAME``)."""
    if "inventory_host" in metafunc.fixturenames:
        _, hosts = _selected(metafunc.config)
        ids = [f"ansible://{h}" for h in hosts]
        metafunc.parametrize("inventory_host", hosts, ids=ids, scope="module")


@pytest.fixture(scope="session")
def _evidence_store(request: pytest.FixtureRequest) -> dict:
    """Collect every selected host's evidence at once (one SSH round trip per host, in
    parallel); a host whose transport cannot be built keeps that as its outcome."""
    from gpuboot.transport import connector

    inv, _ = _selected(request.config)
    names = set()
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if callspec and "inventory_host" in callspec.params:
            names.add(callspec.params["inventory_host"])
    connect = connector(inv)
    targets, failed = {}, {}
    for name in names:
        try:
            targets[name] = (connect(name), inv.resolved(name))
        except Exception as exc:  # that host's ERROR, as in certify
            failed[name] = exc
    return {**collect_nodes(targets, request.config.getoption("--gpuboot-probes")), **failed}


@pytest.fixture(scope="module")
def node(inventory_host: str, _evidence_store: dict) -> dict:
    """This host's evidence and variables (its profile is there: the inventory was
    checked); raises (ERROR) when they could not be had."""
    from gpuboot.checks.rules import NodeContext

    entry = _evidence_store[inventory_host]
    if not isinstance(entry, NodeEvidence):
        raise entry
    return {
        "evidence": entry.evidence,
        "ctx": NodeContext(
            host=inventory_host, profile=entry.profile, hostvars=entry.hostvars, meta=entry.meta
        ),
    }
