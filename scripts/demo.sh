#!/usr/bin/env bash
# The demo: a 2-node emulated HGX H100 lab, install the pinned driver, inject a
# fault on one node, certify, print the table, and always tear the lab down.
set -euo pipefail
cd "$(dirname "$0")/.."
gpuboot=.venv/bin/gpuboot
lab="demo-$$"
trap '$gpuboot lab down --name "$lab" >/dev/null 2>&1 || true' EXIT

$gpuboot lab up --name "$lab" --nodes 2 --profile hgx-h100-sxm-8gpu
inventory=$($gpuboot lab status --name "$lab" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["labs"][0]["inventory"])')

echo; echo "== gpuboot install (first run converges, second run changes nothing)"
$gpuboot install -i "$inventory"
$gpuboot install -i "$inventory"

echo; echo "== inject an Xid 79 (GPU fallen off the bus) on node2, then certify"
$gpuboot lab fault --name "$lab" node2 xid 79
set +e
$gpuboot certify -i "$inventory"
rc=$?
set -e
echo; echo "certify exit code: $rc (1 = a node failed, as expected with the injected fault)"
[ "$rc" -eq 1 ]

echo; echo "== later, the scheduled compliance scan: first a baseline, then node1 loses an NVLink"
history=$(mktemp -d)/scan-history.jsonl
set +e
$gpuboot scan -i "$inventory" --history "$history"
$gpuboot lab fault --name "$lab" node1 nvlink-down 1 3
$gpuboot scan -i "$inventory" --history "$history"
rc=$?
set -e
echo; echo "scan exit code: $rc (1: node1's NVLink is new drift since the previous scan)"
[ "$rc" -eq 1 ]
