"""Node ownership: other tools' markers leave a node alone, a human undoing gpuboot's
take-out is a cancel, someone else's cordon is neither; NVSentinel's opt-out label is
set while gpuboot maintains a node and given back after."""

from __future__ import annotations

import pytest

from gpuboot.k8s import labels as L
from gpuboot.k8s import ownership as O
from gpuboot_lab.kubeapi import node

OURS = {"key": L.TAINT_KEY, "value": "true", "effect": "NoSchedule"}
GPU = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TAKEN_OUT = {L.ANNOTATION_TAKEN_OUT_AT: "1795770000"}
CORDONED_BY_US = {L.ANNOTATION_CORDONED_BY: L.CORDONED_BY_US}


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        (node("n", labels={L.LABEL_MANAGED: "false"}), "gpuboot.io/managed=false"),
        (
            node("n", labels={O.NVSENTINEL_STATE: "draining"}),
            "dgxc.nvidia.com/nvsentinel-state=draining",
        ),
        (
            node("n", labels={O.NVSENTINEL_STATE: "remediation-failed"}),
            "NVSentinel is handling it",
        ),
        (
            node(
                "n",
                taints=[{"key": O.NVSENTINEL_EXTERNAL_REMEDIATION, "value": "extrr-1"}],
            ),
            "nvsentinel.dgxc.nvidia.com/external-remediation=extrr-1",
        ),
        (
            node("n", annotations={"skyhook.nvidia.com/cordon_driver-upgrade": "true"}),
            "'driver-upgrade'",
        ),
        (
            node("n", annotations={"nodewright.nvidia.com/cordon_mig-switch": "true"}),
            "'mig-switch'",
        ),
        (
            node("n", taints=[{"key": O.OUT_OF_SERVICE, "value": "nodeshutdown"}]),
            "node.kubernetes.io/out-of-service",
        ),
    ],
)
def test_each_foreign_marker_leaves_the_node_alone_and_is_named(doc, words):
    assert words in (O.foreign_marker(doc) or "")


def test_a_free_node_has_no_foreign_marker():
    doc = node(
        "n",
        taints=[GPU, OURS],
        labels={L.LABEL_MANAGED: "true", O.NVSENTINEL_MANAGED: "false"},
        annotations={"skyhook.nvidia.com/nodeState_driver-upgrade": "{}", **TAKEN_OUT},
    )
    assert O.foreign_marker(doc) is None


def test_a_pre_existing_cordon_is_neither_foreign_nor_a_cancel():
    someone_elses = node("n", unschedulable=True)
    assert O.foreign_marker(someone_elses) is None and O.cancelled(someone_elses) is None
    # gpuboot took it out on top of that cordon, then the other tool lifted its cordon
    lifted = node(
        "n", taints=[OURS], annotations={**TAKEN_OUT, L.ANNOTATION_WAS_UNSCHEDULABLE: "true"}
    )
    assert O.cancelled(lifted) is None


def test_a_human_uncordoning_gpuboots_cordon_is_a_cancel():
    cordoned = node("n", unschedulable=True, annotations={**CORDONED_BY_US, **TAKEN_OUT})
    assert O.cancelled(cordoned) is None

    uncordoned = node("n", annotations={**CORDONED_BY_US, **TAKEN_OUT})
    assert "uncordoned" in (O.cancelled(uncordoned) or "")


def test_removing_gpuboots_taint_by_hand_is_a_cancel():
    assert O.cancelled(node("n", taints=[GPU, OURS], annotations=TAKEN_OUT)) is None

    assert L.TAINT_KEY in (O.cancelled(node("n", taints=[GPU], annotations=TAKEN_OUT)) or "")


def test_a_node_gpuboot_never_took_out_is_never_cancelled():
    # never certified: no taint of ours and no take-out mark, e.g. a node that joined bare
    assert O.cancelled(node("n")) is None
    # gpuboot's cordon for a drain still stands: the node is out, taint or not
    drained = node("n", unschedulable=True, annotations={**CORDONED_BY_US, **TAKEN_OUT})
    assert O.cancelled(drained) is None


@pytest.mark.parametrize("before", [None, "true", "false", ""])
def test_nvsentinel_stands_aside_while_gpuboot_maintains_and_gets_its_value_back(before):
    labels = {} if before is None else {O.NVSENTINEL_MANAGED: before}
    doc = node("n", labels=labels)

    pause = O.pause_nvsentinel(doc)
    assert pause["metadata"]["resourceVersion"] == "100"
    assert pause["metadata"]["labels"] == {O.NVSENTINEL_MANAGED: "false"}
    paused = apply(doc, pause)
    assert O.pause_nvsentinel(paused) is None  # twice: the kept value stays the operator's

    back = apply(paused, O.resume_nvsentinel(paused))
    assert back["metadata"]["labels"].get(O.NVSENTINEL_MANAGED) == before
    assert O.ANNOTATION_NVSENTINEL_WAS not in back["metadata"]["annotations"]
    assert O.resume_nvsentinel(back) is None


def test_a_label_changed_since_the_pause_stays_as_its_writer_left_it():
    paused = apply(node("n"), O.pause_nvsentinel(node("n")))
    paused["metadata"]["labels"][O.NVSENTINEL_MANAGED] = "true"  # the operator re-enabled it

    patch = O.resume_nvsentinel(paused)

    assert "labels" not in patch["metadata"]
    assert patch["metadata"]["annotations"] == {O.ANNOTATION_NVSENTINEL_WAS: None}


def test_the_pause_and_resume_patches_are_accepted_by_the_api(apiserver, kubeconfig):
    config = pytest.importorskip("kubernetes.config")
    client = pytest.importorskip("kubernetes.client")
    core = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
    apiserver.add(node("gpu-a01", labels={O.NVSENTINEL_MANAGED: "true"}))

    core.patch_node("gpu-a01", O.pause_nvsentinel(apiserver.nodes["gpu-a01"]))
    assert apiserver.nodes["gpu-a01"]["metadata"]["labels"][O.NVSENTINEL_MANAGED] == "false"
    core.patch_node("gpu-a01", O.resume_nvsentinel(apiserver.nodes["gpu-a01"]))

    stored = apiserver.nodes["gpu-a01"]["metadata"]
    assert stored["labels"][O.NVSENTINEL_MANAGED] == "true"
    assert O.ANNOTATION_NVSENTINEL_WAS not in stored["annotations"]


def apply(doc: dict, patch: dict) -> dict:
    """A metadata merge patch as the API server applies it (null removes a key)."""
    out = {**doc, "metadata": {**doc["metadata"]}}
    for part in ("labels", "annotations"):
        merged = {**out["metadata"].get(part, {}), **patch["metadata"].get(part, {})}
        out["metadata"][part] = {k: v for k, v in merged.items() if v is not None}
    return out
