"""Checks a verb makes before it touches any host: what it will write, the kubeconfig.
Bad input is refused while nothing has happened yet."""

from __future__ import annotations

import os


def check_output_dir(path: str, flag: str) -> None:
    """An existing directory this user can create files in (tried, not guessed: root
    passes every permission check but not a read-only mount)."""
    import tempfile

    from gpuboot.errors import BadInput

    if not os.path.isdir(path):
        raise BadInput(
            "is not an existing directory", where=f"{flag} {path}", hint="create it first"
        )
    try:
        with tempfile.TemporaryFile(dir=path, prefix=".gpuboot-write-check-"):
            pass
    except OSError as exc:
        raise BadInput(
            f"cannot write there: {exc.strerror or exc}",
            where=f"{flag} {path}",
            hint="pick a directory this user can write to",
        ) from exc


def check_output_file(path: str, flag: str) -> None:
    """A file gpuboot may (over)write: in a writable directory, not a directory itself."""
    from gpuboot.errors import BadInput

    if os.path.isdir(path):
        raise BadInput("is a directory", where=f"{flag} {path}", hint="name a file")
    check_output_dir(os.path.dirname(os.path.abspath(path)), flag)


MAX_KUBECONFIG_BYTES = 16 * 1024 * 1024  # many clusters' embedded certificates fit
KUBECONFIG_HINT = "pass --kubeconfig FILE (and --k8s-context NAME) as for kubectl"


def check_kubeconfig(args) -> None:
    """The check install makes before touching a host: each kubeconfig file the client
    would read is a regular file within bounds (yamlsafe.read_capped_yaml: the client
    itself would wait on a FIFO, read a device without end, or recurse on deep YAML), the
    kubeconfig loads, and the disruption budget's options hold together."""
    from gpuboot.cli.gate import limits_from
    from gpuboot.k8s.gate import connect
    from gpuboot.yamlsafe import read_capped_yaml

    for path in kubeconfig_files(args.kubeconfig):
        read_capped_yaml(path, MAX_KUBECONFIG_BYTES, "kubeconfig", hint=KUBECONFIG_HINT)
    connect(args.kubeconfig, args.k8s_context)
    limits_from(args)


def kubeconfig_files(kubeconfig: str | None) -> list[str]:
    """The files the Kubernetes client reads: the one named, else $KUBECONFIG's existing
    entries, else ~/.kube/config where it exists."""
    if kubeconfig:
        return [kubeconfig]
    named = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    candidates = named or [os.path.expanduser("~/.kube/config")]
    return [p for p in candidates if os.path.lexists(p)]
