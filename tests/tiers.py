"""The pure tier is honest: a test that starts a process (a subprocess, a fork, the
emulator's shims, a tool of the OS) must say so with the ``subprocess`` marker, or it
fails here. ``make test-fast`` runs the unmarked unit tests alone, in well under a minute,
before the rest of the gate."""

from __future__ import annotations

import os
import subprocess

import pytest

# Tests with one of these markers may start processes; every other test may not.
MAY_SPAWN = ("subprocess", "lab", "molecule", "browser")
_running: list[pytest.Item] = []


def _refuse(what: str) -> None:
    if _running:
        item = _running[-1]
        pytest.fail(
            f"{item.nodeid} started a process ({what}): mark it "
            "`pytest.mark.subprocess`, the pure tier (make test-fast) runs none",
            pytrace=False,
        )


_popen_init = subprocess.Popen.__init__
_fork = os.fork


def _guarded_popen(self, *args, **kwargs):
    _refuse(f"subprocess {args[0] if args else kwargs.get('args')!r}")
    _popen_init(self, *args, **kwargs)


def _guarded_fork():
    _refuse("os.fork")
    return _fork()


subprocess.Popen.__init__ = _guarded_popen  # type: ignore[method-assign]
os.fork = _guarded_fork


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "subprocess: starts processes (not in the pure tier)")
    # Ansible's display finds libc for wcwidth through `ldconfig -p` when it is first
    # imported: a cost of the import, paid here once, not a process a test starts.
    import ansible.utils.display  # noqa: F401


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    return (yield from _guarded(item))


def _guarded(item: pytest.Item):
    pure = not any(item.get_closest_marker(m) for m in MAY_SPAWN)
    if pure:
        _running.append(item)
    try:
        return (yield)
    finally:
        if pure:
            _running.pop()
