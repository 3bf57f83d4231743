"""The two node-side steps that are not an install: a GPU reset and a reboot, each a small
play run through gpuboot.runner (every argument a list item or an extra var: no shell line
is built from a value). The reboot is the install's own gpuboot_reboot role, handed a
reboot request the way the other roles record theirs; its ansible.builtin.reboot waits
for the boot time (or the inventory's gpuboot_reboot_boot_time_command) to change and the
role checks the request is gone and the pinned driver loaded.

Each play takes the node's lease first (gpuboot.node.lease, the one install takes) and gives
it back in an always, so a second controller never converges a node remediation is
resetting or rebooting; a lease another controller holds fails the first task, before
anything changes, and the step is held, not failed (``refused`` reads it)."""

from __future__ import annotations

from pathlib import Path

from gpuboot import paths
from gpuboot.inventory import Inventory
from gpuboot.runner import HostResult, RunSpec, new_run_dir, run

# The tasks that take the node's lease: these plays' and install's (playbooks/install.yml).
LEASE_TASKS = ("REMEDIATE-000 ", "INST-004 ")

# Daemons that hold every GPU open: a reset is refused while they run.
GPU_DAEMONS = ("nvidia-persistenced", "nvidia-dcgm")

RESET_PLAY = """\
- name: gpuboot remediate | reset the GPUs an Xid named
  hosts: all
  gather_facts: false
  tasks:
    - name: "REMEDIATE-000 | AUDIT | Take this node's lease: one controller acts on it at a time"
      gpuboot.node.lease:
        ttl: "{{ gpuboot_lease_ttl | default(7200) }}"
      changed_when: false  # bookkeeping: no managed state changes
    - name: "REMEDIATE-007 | PATCH | Reset the GPUs, then give the lease back whatever happened"
      block:
        - name: "REMEDIATE-001 | AUDIT | List the compute processes on the GPUs"
          ansible.builtin.command:
            argv:
              - nvidia-smi
              - --query-compute-apps=pid
              - --format=csv,noheader
              - -i
              - "{{ gpuboot_remediate_gpus | join(',') }}"
          register: __gpuboot_apps
          changed_when: false
          failed_when: false  # none listed: the reset itself says whether the GPU is in use
        - name: "REMEDIATE-002 | PATCH | Stop the GPUs' compute processes"
          ansible.builtin.command:
            argv: [kill, "{{ item }}"]
          loop: >-
            {{ __gpuboot_apps.stdout_lines | default([]) | map('trim')
               | select('match', '^[0-9]+$') | list }}
          failed_when: false  # gone meanwhile
        - name: "REMEDIATE-003 | PATCH | Reset the GPUs with their daemons stopped"
          block:
            - name: "REMEDIATE-004 | PATCH | Stop the daemons that hold every GPU open"
              ansible.builtin.service:
                name: "{{ item }}"
                state: stopped
              loop: "{{ gpuboot_remediate_daemons }}"
              register: __gpuboot_stopped
              failed_when: false  # not installed on this node
            - name: "REMEDIATE-005 | PATCH | Reset the GPUs"
              ansible.builtin.command:
                argv: [nvidia-smi, -r, -i, "{{ gpuboot_remediate_gpus | join(',') }}"]
          always:
            - name: "REMEDIATE-006 | PATCH | Start the daemons stopped for the reset"
              ansible.builtin.service:
                name: "{{ item.item }}"
                state: started
              loop: "{{ __gpuboot_stopped.results | default([]) | selectattr('changed') | list }}"
      always:
        - name: "REMEDIATE-009 | AUDIT | Give this node's lease back"
          gpuboot.node.lease:
            state: released
          changed_when: false  # bookkeeping: no managed state changes
"""

REBOOT_PLAY = """\
- name: gpuboot remediate | reboot the node
  hosts: all
  gather_facts: false
  tasks:
    - name: "REMEDIATE-000 | AUDIT | Take this node's lease: one controller acts on it at a time"
      gpuboot.node.lease:
        ttl: "{{ gpuboot_lease_ttl | default(7200) }}"
      changed_when: false  # bookkeeping: no managed state changes
    - name: "REMEDIATE-007 | PATCH | Reboot the node, then give the lease back whatever happened"
      block:
        - name: "REMEDIATE-010 | PATCH | Record the remediation's reboot request"
          ansible.builtin.copy:
            dest: >-
              {{ gpuboot_reboot_marker_dir | default('/var/run')
              }}/reboot-required.gpuboot-remediate
            content: "remediation: {{ gpuboot_remediate_reason }}\\n"
            mode: "0644"
        - name: "REMEDIATE-011 | PATCH | Reboot through the install's reboot role"
          ansible.builtin.import_role:
            name: gpuboot_reboot
      always:
        - name: "REMEDIATE-009 | AUDIT | Give this node's lease back"
          gpuboot.node.lease:
            state: released
          changed_when: false  # bookkeeping: no managed state changes
"""


def _play(inv: Inventory, host: str, label: str, text: str, extravars: dict) -> HostResult:
    run_id, run_dir = new_run_dir(label)
    playbook = run_dir / f"{label}.yml"
    paths.write_private(playbook, text)
    spec = RunSpec(
        playbook=Path(playbook),
        inventory=(inv.path,),
        label=label,
        limit=host,
        extravars=extravars,
    )
    played = run(spec, into=(run_id, run_dir))
    return played.hosts.get(host) or HostResult(
        host=host, failed=1, reason="the play never reached this host"
    )


def reset_gpus(inv: Inventory, host: str, gpus: tuple[str, ...]) -> HostResult:
    return _play(
        inv,
        host,
        "remediate-reset",
        RESET_PLAY,
        {"gpuboot_remediate_gpus": list(gpus), "gpuboot_remediate_daemons": list(GPU_DAEMONS)},
    )


def reboot(inv: Inventory, host: str, reason: str) -> HostResult:
    return _play(
        inv,
        host,
        "remediate-reboot",
        REBOOT_PLAY,
        {"gpuboot_allow_reboot": True, "gpuboot_remediate_reason": reason[:200]},
    )


def refused(played: HostResult) -> str | None:
    """Why the play left the node alone at its lease (another controller holds it, or the
    lease could not be read), None when it got past it: nothing was done on the node, so the
    step is held back, never a failure to climb on."""
    if played.status == "failed" and (played.failed_task or "").startswith(LEASE_TASKS):
        return played.reason or f"the node's lease was not taken ({played.failed_task})"
    return None
