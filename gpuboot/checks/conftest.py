"""Fixtures for the testinfra checks: evidence per host, collected once, in parallel.

The same files run under `gpuboot certify` (which passes --gpuboot-bundle so the raw
evidence is kept) and under molecule's testinfra verifier.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gpuboot import __version__
from gpuboot.checks.pair_phase import run_pair_probes
from gpuboot.collect import (
    NodeAnswerRejected,
    Probe,
    ProbeOutput,
    bundle_host_dir,
    script,
    state_probes,
    unpack,
    write_host_bundle,
)
from gpuboot.errors import GpubootError
from gpuboot.inventory import with_derived
from gpuboot.probes import node_probes, resolve_level
from gpuboot.profiles import load_profile
from gpuboot.remote import RemoteTimeout, run_with_deadline
from gpuboot.runner import failure_reason, last_line

MAX_PARALLEL = 32

# What a bundle's meta.json "pins" records of a host's variables: exactly what the rules
# read (ctx.var / ctx.enabled / hostvars in gpuboot/checks and gpuboot/probes) and the
# stack's pins, so `gpuboot evaluate` judges as certify did. Nothing else: an inventory
# also holds mirror URLs with credentials, tokens and passwords, which a bundle must not.
_COMPONENTS = (
    "nvidia_fabricmanager",
    "nvidia_nscq",
    "cuda_toolkit",
    "doca_ofed",
    "nvidia_fs",
    "nvidia_container_toolkit",
    "dcgm",
)
BUNDLE_VARS = frozenset(
    {
        "gpuboot_profile",
        "gpuboot_stack",
        "gpuboot_os_family",
        "gpuboot_probes",
        "gpuboot_baseline_manage_kernel",
        "gpuboot_roce_pfc_priorities",
        "gpuboot_roce_trust",
        "gpuboot_thresholds",
        "gpuboot_mig",
        "nvidia_mig_layout",
        "kernel_version",
        "kernel_package_version",
        "kernel_packages",
        "kernel_hold_method",
        "kernel_hold_packages",
        "nvidia_driver_branch",
        "nvidia_driver_version",
        "nvidia_driver_flavor",
        "nvidia_driver_packages",
        "nvidia_driver_module_stream",
        "nvidia_peermem_enabled",
        *(f"{c}_{k}" for c in _COMPONENTS for k in ("enabled", "package", "version", "packages")),
    }
)
_SECRET_WORDS = ("password", "passwd", "token", "secret", "credential", "_key")
_URL_USERINFO = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]*@")


def _scrub(value):
    """Credentials out of any URL in a recorded value (``https://user:pw@host`` -> host)."""
    if isinstance(value, str):
        return _URL_USERINFO.sub(r"\1", value)
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items()}
    return value


def bundle_pins(hostvars: dict) -> dict:
    """The allow-listed variables a bundle records (never one named like a secret)."""
    return {
        k: _scrub(v)
        for k, v in sorted(hostvars.items())
        if k in BUNDLE_VARS and not any(w in k.lower() for w in _SECRET_WORDS)
    }


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
    deadline = collect_deadline(hostvars, (*state, *bandwidth))
    try:
        cmd = run_with_deadline(
            host, script(procfs, sysfs, state, bandwidth), deadline, "evidence collection"
        )
    except RemoteTimeout as exc:
        exc.where = _name(host)
        raise
    except Exception as exc:  # ssh failed (testinfra: RuntimeError carrying the script)
        raise HostUnreachable(f"unreachable: {failure_reason(exc)}", where=_name(host)) from None
    if cmd.rc != 0 or not cmd.stdout.strip():
        why = last_line(cmd.stderr) or last_line(cmd.stdout) or f"exit {cmd.rc}"
        raise HostUnreachable(
            f"evidence collection failed (exit {cmd.rc}): {why}", where=_name(host)
        )
    try:
        evidence = unpack(cmd.stdout.strip(), state, bandwidth)
    except NodeAnswerRejected as exc:
        exc.where = _name(host)
        raise
    meta = node_meta(_name(host), hostvars, level, (*state, *bandwidth), started)
    return {"evidence": evidence, "hostvars": hostvars, "meta": meta, "profile": profile}


# Beyond the probes' own `timeout`s: ssh set-up, the tar, a slow node. A tool stuck in
# the kernel (D state) outlives `timeout` on the node, and a hostile node may simply never
# answer: the controller's own deadline is what keeps one node from holding the run.
COLLECT_MARGIN_S = 60


def collect_deadline(hostvars: dict, probes: Sequence[Probe]) -> float:
    """Seconds a node's collection may take: its probes' timeouts end to end plus a
    margin, or the host's ``gpuboot_collect_timeout``."""
    own = hostvars.get("gpuboot_collect_timeout")
    if isinstance(own, int | float) and not isinstance(own, bool) and own > 0:
        return float(own)
    return float(sum(p.timeout for p in probes) + COLLECT_MARGIN_S)


def node_meta(
    name: str, hostvars: dict, level: str, probes: Sequence[Probe], started: float
) -> dict:
    """A host's meta.json as certify keeps it: what `gpuboot evaluate` needs to judge the
    bundle as certify did (profile, the allow-listed variables, the probe level), no more."""
    return {
        "host": name,
        "profile": hostvars.get("gpuboot_profile"),
        "collected_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "collect_s": round(time.time() - started, 3),
        "gpuboot": __version__,
        "pins": bundle_pins(hostvars),
        "probes": level,
        "commands": {p.file: p.command for p in probes},
    }


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
            try:  # a host whose evidence cannot be kept safely is ERROR, not the run
                target = bundle_host_dir(bundle_path, name)
                write_host_bundle(target, entry["evidence"], entry["meta"])
            except (GpubootError, OSError) as exc:
                store[name] = exc
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
