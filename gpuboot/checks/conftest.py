"""Fixtures for the testinfra checks: evidence per host, collected once, in parallel.

The same files run under `gpuboot certify` (which passes --gpuboot-bundle so the raw
evidence is kept) and under molecule's testinfra verifier.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gpuboot import __version__
from gpuboot.checks.pair_phase import run_pair_probes
from gpuboot.collect import ProbeOutput, script, state_probes, unpack, write_host_bundle
from gpuboot.errors import GpubootError
from gpuboot.inventory import with_derived
from gpuboot.probes import node_probes, resolve_level
from gpuboot.profiles import load_profile

MAX_PARALLEL = 32


class HostUnreachable(GpubootError):
    """Evidence could not be collected (SSH failed or the node's shell broke)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--gpuboot-bundle", default=None, help="directory to keep the raw evidence in")
    parser.addoption(
        "--gpuboot-probes", default=None, help="probe level none|quick|full (default: host var)"
    )


def _name(host) -> str:
    return host.backend.get_hostname()


def _collect(host, level_override: str | None = None) -> dict:
    hostvars = host.ansible.get_variables() if host.backend.NAME == "ansible" else {}
    hostvars = with_derived(hostvars)  # the stack's pins, the MIG layout: what checks expect
    procfs = hostvars.get("gpuboot_procfs", "/proc")
    sysfs = hostvars.get("gpuboot_sysfs", "/sys")
    profile = load_profile(hostvars["gpuboot_profile"]) if "gpuboot_profile" in hostvars else None
    level = resolve_level(hostvars, level_override)
    state = state_probes(profile, hostvars)
    bandwidth = node_probes(profile, hostvars, level) if profile else []
    started = time.time()
    cmd = host.run(script(procfs, sysfs, state, bandwidth))
    if cmd.rc != 0 or not cmd.stdout.strip():
        why = (cmd.stderr.strip() or cmd.stdout.strip() or f"exit {cmd.rc}").splitlines()[-1]
        raise HostUnreachable(
            f"evidence collection failed (exit {cmd.rc}): {why}", where=_name(host)
        )
    evidence = unpack(cmd.stdout.strip())
    pins = {k: v for k, v in hostvars.items() if k.startswith(("nvidia_", "gpuboot_"))}
    pins.update({k: v for k, v in hostvars.items() if k.endswith(("_enabled", "_version"))})
    meta = {
        "host": _name(host),
        "profile": hostvars.get("gpuboot_profile"),
        "collected_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "collect_s": round(time.time() - started, 3),
        "gpuboot": __version__,
        "pins": pins,
        "probes": level,
        "commands": {p.file: p.command for p in (*state, *bandwidth)},
    }
    return {"evidence": evidence, "hostvars": hostvars, "meta": meta, "profile": profile}


def _runner(hosts: dict):
    def run(name: str, command: str) -> ProbeOutput:
        try:
            out = hosts[name].run(command)
        except Exception as exc:  # an SSH failure is the pair's failure, not the run's
            return ProbeOutput("", str(exc), 255)
        return ProbeOutput(out.stdout, out.stderr, out.rc)

    return run


@pytest.fixture(scope="session")
def _evidence_store(request: pytest.FixtureRequest) -> dict:
    """Collect every host's evidence at once (one SSH round trip per host, in parallel)."""
    bundle = request.config.getoption("--gpuboot-bundle")
    bundle_path = Path(bundle) if bundle else None
    hosts = {}
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if callspec and "_testinfra_host" in callspec.params:
            h = callspec.params["_testinfra_host"]
            hosts[_name(h)] = h

    level = request.config.getoption("--gpuboot-probes")

    def attempt(host):
        try:
            return _collect(host, level)
        except Exception as exc:  # kept per host: one broken node never stops the others
            return exc

    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, max(1, len(hosts)))) as pool:
        store = dict(zip(hosts, pool.map(attempt, hosts.values()), strict=True))
    ok = {h: e for h, e in store.items() if not isinstance(e, Exception)}
    run_pair_probes(ok, _runner(hosts))
    if bundle_path is not None:
        for name, entry in ok.items():
            write_host_bundle(bundle_path / name, entry["evidence"], entry["meta"])
    return store


@pytest.fixture(scope="module")
def node(host, _evidence_store) -> dict:
    """This host's evidence and variables; raises (ERROR) when they could not be had."""
    from gpuboot.checks.rules import NodeContext

    entry = _evidence_store.get(_name(host))
    if entry is None:
        entry = _collect(host)
    if isinstance(entry, Exception):
        raise entry
    hostvars = entry["hostvars"]
    profile = load_profile(hostvars["gpuboot_profile"]) if "gpuboot_profile" in hostvars else None
    if profile is None:
        raise HostUnreachable("host has no gpuboot_profile", where=_name(host))
    return {
        "evidence": entry["evidence"],
        "ctx": NodeContext(
            host=_name(host), profile=profile, hostvars=hostvars, meta=entry.get("meta", {})
        ),
    }
