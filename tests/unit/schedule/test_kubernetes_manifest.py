"""The CronJob manifest: every document a valid object of the official client's models
(no unknown field), RBAC for exactly the calls gpuboot's Kubernetes code makes, the
scan's reported codes mapped to a completed Job."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from gpuboot.errors import BadInput
from gpuboot.schedule import failing_codes, reported_codes
from gpuboot.schedule import kubernetes as k
from tests.paths import REPO

client = pytest.importorskip("kubernetes.client")

MODELS = {
    "Namespace": "V1Namespace",
    "ServiceAccount": "V1ServiceAccount",
    "ClusterRole": "V1ClusterRole",
    "ClusterRoleBinding": "V1ClusterRoleBinding",
    "Role": "V1Role",
    "RoleBinding": "V1RoleBinding",
    "ConfigMap": "V1ConfigMap",
    "PersistentVolumeClaim": "V1PersistentVolumeClaim",
    "CronJob": "V1CronJob",
}
INVENTORY = "all:\n  hosts:\n    node1: {ansible_host: 10.0.0.1}\n"


def _job(**kw) -> k.CronJob:
    base = dict(
        name="gpuboot-scan",
        namespace="gpuboot",
        image="registry.example/gpuboot:0.1.0",
        schedule=k.cron("hourly"),
        inventory_text=INVENTORY,
        scan_args=("--textfile-dir", "/var/lib/gpuboot/textfile"),
    )
    return k.CronJob(**{**base, **kw})


def _docs(job: k.CronJob) -> list[dict]:
    return [d for d in yaml.safe_load_all(k.to_yaml(job, k.manifests(job))) if d]


def _unknown_fields(doc: dict) -> object:
    """The document as the client's model keeps it: a field the model does not know is
    dropped, so a round trip that differs names one."""
    api = client.ApiClient()
    model = api._ApiClient__deserialize(doc, MODELS[doc["kind"]])
    return api.sanitize_for_serialization(model)


@pytest.mark.parametrize("remediate", [False, True])
def test_every_document_is_a_valid_model_without_unknown_fields(remediate):
    docs = _docs(_job(remediate=remediate))
    assert {d["kind"] for d in docs} >= {"CronJob", "PersistentVolumeClaim", "ClusterRole"}
    for doc in docs:
        assert _unknown_fields(doc) == doc, doc["kind"]


def test_a_field_the_models_do_not_know_is_caught():
    doc = next(d for d in _docs(_job()) if d["kind"] == "CronJob")
    doc["spec"]["concurrency"] = "Forbid"
    assert _unknown_fields(doc) != doc


def _cronjob(job: k.CronJob) -> dict:
    return next(d for d in _docs(job) if d["kind"] == "CronJob")


def test_one_scan_at_a_time_with_its_home_on_a_claim():
    cron = _cronjob(_job())
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    assert cron["spec"]["schedule"] == "0 * * * *"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    home = volumes[mounts[k.HOME]["name"]]
    assert home["persistentVolumeClaim"]["claimName"] == "gpuboot-scan-home"
    assert {"name": "GPUBOOT_HOME", "value": k.HOME} in container["env"]
    assert volumes[mounts[k.SSH_KEY]["name"]]["secret"]["secretName"] == "gpuboot-ssh"
    assert mounts[k.INVENTORY]["subPath"] == "inventory.yml"  # a file, not a link
    assert pod["serviceAccountName"] == "gpuboot-scan"


def test_values_reach_the_scan_as_arguments_never_in_the_shell_line():
    cron = _cronjob(_job(scan_args=("--history", "/var/lib/gpuboot/h; rm -rf /")))
    (container,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["/bin/sh", "-c", k.entry_script(), "gpuboot-scan"]
    assert container["args"][-1] == "/var/lib/gpuboot/h; rm -rf /"
    assert "rm -rf" not in k.entry_script()
    assert container["args"][:7] == [
        "gpuboot",
        "scan",
        "-q",
        "-i",
        k.INVENTORY,
        "--kubeconfig",
        k.KUBECONFIG,
    ]


def test_the_kubeconfig_is_the_service_accounts():
    config = next(d for d in _docs(_job()) if d["kind"] == "ConfigMap")["data"]
    kubeconfig = yaml.safe_load(config["kubeconfig"])
    assert kubeconfig["users"][0]["user"] == {"tokenFile": f"{k.SA_DIR}/token"}
    assert config["inventory.yml"] == INVENTORY


def _calls_in_source() -> set[str]:
    """Every Kubernetes API method gpuboot's code calls on its clients."""
    call = re.compile(r"\b(?:core|coordination|_coordination\([^)]*\))\s*\.\s*([a-z_]+)\(")
    found = set()
    for path in (REPO / "gpuboot").rglob("*.py"):
        found |= set(call.findall(path.read_text()))
    return found


def test_rbac_covers_exactly_the_calls_the_code_makes():
    calls = _calls_in_source()
    assert "patch_node" in calls and "create_namespaced_lease" in calls  # the scan worked
    assert calls == set(k.CALLS), (
        f"undecided: {sorted(calls - set(k.CALLS))}, unused: {sorted(set(k.CALLS) - calls)}"
    )


def _granted(docs: list[dict]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for d in docs
        if d["kind"] in ("ClusterRole", "Role")
        for rule in d["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_a_scan_alone_may_only_read_and_mark_nodes():
    assert _granted(_docs(_job())) == {k.CALLS[c] for c in k.SCAN_CALLS}
    assert _granted(_docs(_job(remediate=True))) == set(k.CALLS.values())
    lease_role = next(d for d in _docs(_job(remediate=True)) if d["kind"] == "Role")
    assert lease_role["metadata"]["namespace"] == k.LEASE_NAMESPACE


@pytest.mark.parametrize(
    ("field", "value"), [("name", "Gpuboot_Scan"), ("namespace", "a b"), ("image", "")]
)
def test_bad_names_are_refused(field, value):
    with pytest.raises(BadInput):
        k.manifests(_job(**{field: value}))


@pytest.mark.parametrize("every", ["*-*-* *:00/15:00", "hourly\n", "* * * *"])
def test_a_schedule_cron_cannot_read_is_refused(every):
    with pytest.raises(BadInput, match="--every"):
        k.cron(every)


@pytest.mark.subprocess
@pytest.mark.parametrize("code", [0, *reported_codes(), *failing_codes(), 7])
def test_the_entry_completes_the_job_for_reported_codes_only(code):
    proc = subprocess.run(
        ["/bin/sh", "-c", k.entry_script(), "gpuboot-scan", "/bin/sh", "-c", f"exit {code}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == (0 if code in (0, *reported_codes()) else code), proc.stderr
