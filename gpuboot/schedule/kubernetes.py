"""A Kubernetes CronJob that runs `gpuboot scan` in the cluster it acts on, with what it
needs: a persistent volume for GPUBOOT_HOME (history, runs, locks, breaker state), a
kubeconfig from the pod's service account, RBAC for exactly the API calls gpuboot makes,
the inventory in a ConfigMap and the SSH key from a Secret.

Kubernetes has no SuccessExitStatus: the container's entry maps the scan's "it ran and
reported" codes (gpuboot.schedule.reported_codes) to 0 so the Job completes, and keeps
2 and 3 (bad input, a broken run) as the Job's failure. The map is a constant shell line;
every value (paths, options) reaches the scan as an argument ("$@"), never in that line."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gpuboot import __version__
from gpuboot.errors import BadInput
from gpuboot.schedule import reported_codes

# Where the pod finds what the manifest mounts.
HOME = "/var/lib/gpuboot"
INVENTORY = "/etc/gpuboot/inventory.yml"
KUBECONFIG = "/etc/gpuboot/kubeconfig"
SSH_KEY = "/etc/gpuboot/ssh/id_ed25519"
KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"  # ssh's global file: read whatever the user
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
LEASE_NAMESPACE = "medik8s-leases"  # gpuboot.k8s.lease

# Every call gpuboot's Kubernetes code makes (gpuboot/k8s, gpuboot/remediate), as the
# RBAC rule it needs: (API group, resource, verb). A call not listed here fails
# tests/unit/schedule until it is decided.
CALLS: dict[str, tuple[str, str, str]] = {
    "read_node": ("", "nodes", "get"),
    "list_node": ("", "nodes", "list"),
    "patch_node": ("", "nodes", "patch"),
    "patch_node_status": ("", "nodes/status", "patch"),
    "list_pod_for_all_namespaces": ("", "pods", "list"),
    "create_namespaced_pod_eviction": ("", "pods/eviction", "create"),
    "create_namespace": ("", "namespaces", "create"),
    "read_namespaced_lease": ("coordination.k8s.io", "leases", "get"),
    "create_namespaced_lease": ("coordination.k8s.io", "leases", "create"),
    "replace_namespaced_lease": ("coordination.k8s.io", "leases", "update"),
    "delete_namespaced_lease": ("coordination.k8s.io", "leases", "delete"),
}
# A scan's join gate and census: read, list and mark nodes, write their conditions.
SCAN_CALLS = ("read_node", "list_node", "patch_node", "patch_node_status")
# --remediate adds the ladder: drains (pods, evictions), the node's Lease, its namespace.
REMEDIATE_CALLS = tuple(CALLS)

CRON = re.compile(r"[0-9*/,A-Za-z-]+( [0-9*/,A-Za-z-]+){4}")
SHORTHANDS = {"hourly": "0 * * * *", "daily": "0 0 * * *", "weekly": "0 0 * * 0"}
DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


def cron(every: str) -> str:
    if every in SHORTHANDS:
        return SHORTHANDS[every]
    if CRON.fullmatch(every):
        return every
    raise BadInput(
        f"--every {every!r} is not a CronJob schedule",
        where="--every",
        hint="with --kubernetes: hourly, daily, weekly or five cron fields, e.g. "
        "--every '*/30 * * * *'",
    )


def entry_script() -> str:
    """The container's command: the scan's own argv as "$@", its reported codes mapped to
    a completed Job."""
    codes = "|".join(str(c) for c in reported_codes())
    return (
        '"$@"; rc=$?; case $rc in '
        f'{codes}) echo "gpuboot scan exited $rc: it ran and reported" >&2; exit 0;; '
        "esac; exit $rc"
    )


@dataclass(frozen=True)
class CronJob:
    name: str
    namespace: str
    image: str
    schedule: str
    inventory_text: str  # the one-file inventory, as the ConfigMap carries it
    scan_args: tuple[str, ...]  # the operator's scan options after -i and --kubeconfig
    ssh_secret: str = "gpuboot-ssh"
    storage: str = "10Gi"
    storage_class: str | None = None
    remediate: bool = False
    labels: dict[str, str] = field(default_factory=dict)


def check_names(job: CronJob) -> None:
    for flag, value in (("--name", job.name), ("--namespace", job.namespace)):
        if not DNS_LABEL.fullmatch(value):
            raise BadInput(
                f"{flag} {value!r} is not a Kubernetes name (RFC 1123 label)",
                where=flag,
                hint="lower-case letters, digits and -, at most 63, e.g. gpuboot-scan",
            )
    if not job.image or any(c.isspace() for c in job.image):
        raise BadInput(
            f"--image {job.image!r} is not an image reference",
            where="--image",
            hint="an image with gpuboot installed, e.g. registry.example/gpuboot:0.1.0",
        )


def rules(calls: tuple[str, ...]) -> list[dict[str, Any]]:
    """RBAC rules for these calls, one per (group, resource), verbs sorted."""
    grouped: dict[tuple[str, str], set[str]] = {}
    for call in calls:
        group, resource, verb = CALLS[call]
        grouped.setdefault((group, resource), set()).add(verb)
    return [
        {"apiGroups": [group], "resources": [resource], "verbs": sorted(verbs)}
        for (group, resource), verbs in sorted(grouped.items())
    ]


def kubeconfig() -> str:
    """The pod's own service account as a kubeconfig (gpuboot's --kubeconfig reads a
    file): its token file is read again on every run, so a rotated token is used."""
    return (
        "apiVersion: v1\nkind: Config\n"
        "clusters:\n- name: in-cluster\n  cluster:\n"
        "    server: https://kubernetes.default.svc\n"
        f"    certificate-authority: {SA_DIR}/ca.crt\n"
        "users:\n- name: service-account\n  user:\n"
        f"    tokenFile: {SA_DIR}/token\n"
        "contexts:\n- name: in-cluster\n  context: {cluster: in-cluster, user: service-account}\n"
        "current-context: in-cluster\n"
    )


def manifests(job: CronJob) -> list[dict[str, Any]]:
    check_names(job)
    meta = {
        "namespace": job.namespace,
        "labels": {"app.kubernetes.io/name": "gpuboot", **job.labels},
    }
    docs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": job.namespace}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": job.name, **meta}},
    ]
    subject = [{"kind": "ServiceAccount", "name": job.name, "namespace": job.namespace}]
    cluster_calls = REMEDIATE_CALLS if job.remediate else SCAN_CALLS
    cluster_calls = tuple(c for c in cluster_calls if CALLS[c][1] != "leases")
    docs += [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": job.name},
            "rules": rules(cluster_calls),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": job.name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": job.name,
            },
            "subjects": subject,
        },
    ]
    if job.remediate:  # the node's Lease lives in one namespace: a Role there suffices
        lease_calls = tuple(c for c in REMEDIATE_CALLS if CALLS[c][1] == "leases")
        docs += [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NAMESPACE}},
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": job.name, "namespace": LEASE_NAMESPACE},
                "rules": rules(lease_calls),
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": job.name, "namespace": LEASE_NAMESPACE},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": job.name,
                },
                "subjects": subject,
            },
        ]
    docs += [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": job.name, **meta},
            "data": {"inventory.yml": job.inventory_text, "kubeconfig": kubeconfig()},
        },
        _claim(job, meta),
        _cronjob(job, meta),
    ]
    return docs


def _claim(job: CronJob, meta: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": job.storage}},
    }
    if job.storage_class:
        spec["storageClassName"] = job.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": f"{job.name}-home", **meta},
        "spec": spec,
    }


def _cronjob(job: CronJob, meta: dict[str, Any]) -> dict[str, Any]:
    argv = ["gpuboot", "scan", "-q", "-i", INVENTORY, "--kubeconfig", KUBECONFIG, *job.scan_args]
    container = {
        "name": "scan",
        "image": job.image,
        "command": ["/bin/sh", "-c", entry_script(), "gpuboot-scan"],
        "args": argv,
        "env": [
            {"name": "GPUBOOT_HOME", "value": HOME},
            # the key Ansible's settings name: gpuboot's ssh falls back to it
            {"name": "ANSIBLE_PRIVATE_KEY_FILE", "value": SSH_KEY},
            {"name": "ANSIBLE_LOCAL_TEMP", "value": "/tmp/ansible"},
            {"name": "HOME", "value": "/tmp"},
        ],
        "volumeMounts": [
            {"name": "home", "mountPath": HOME},
            # subPath: the file itself, not the ConfigMap's link (gpuboot refuses links)
            {
                "name": "config",
                "mountPath": INVENTORY,
                "subPath": "inventory.yml",
                "readOnly": True,
            },
            {"name": "config", "mountPath": KUBECONFIG, "subPath": "kubeconfig", "readOnly": True},
            {"name": "ssh", "mountPath": SSH_KEY, "subPath": "id_ed25519", "readOnly": True},
            {"name": "ssh", "mountPath": KNOWN_HOSTS, "subPath": "known_hosts", "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "securityContext": {
            # root without any capability: ssh accepts only a key file no one else may read,
            # and a Secret's files belong to root (an fsGroup would open them to a group)
            "runAsUser": 0,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    pod = {
        "serviceAccountName": job.name,
        "automountServiceAccountToken": True,
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [
            {"name": "home", "persistentVolumeClaim": {"claimName": f"{job.name}-home"}},
            {"name": "config", "configMap": {"name": job.name}},
            {"name": "ssh", "secret": {"secretName": job.ssh_secret, "defaultMode": 0o400}},
            {"name": "tmp", "emptyDir": {}},
        ],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": job.name, **meta},
        "spec": {
            "schedule": job.schedule,
            # one scan at a time: the history and the hosts' locks are one per volume
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 600,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "metadata": {"labels": meta["labels"]},
                "spec": {
                    # a broken run is not retried at once: the next schedule runs again
                    "backoffLimit": 0,
                    "template": {"metadata": {"labels": meta["labels"]}, "spec": pod},
                },
            },
        },
    }


def to_yaml(job: CronJob, docs: list[dict[str, Any]]) -> str:
    import yaml

    head = (
        f"# {job.name}: gpuboot scan as a Kubernetes CronJob, written by gpuboot schedule "
        f"(gpuboot {__version__}).\n"
        f"# Before applying, create the SSH Secret the pod mounts (the key nodes accept and\n"
        f"# their host keys: host key checking stays on):\n"
        f"#   kubectl -n {job.namespace} create secret generic {job.ssh_secret} \\\n"
        f"#     --from-file=id_ed25519=KEY --from-file=known_hosts=KNOWN_HOSTS\n"
        f"# The image must hold gpuboot with its k8s extra and /bin/sh. RBAC: "
        + (
            "nodes, pods, evictions, namespaces and leases (--remediate)"
            if job.remediate
            else "nodes get/list/patch and nodes/status patch (the scan's gate)"
        )
        + ".\n"
    )
    body = "---\n".join(yaml.safe_dump(d, sort_keys=False, width=100) for d in docs)
    return head + "---\n" + body
