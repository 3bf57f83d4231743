"""A failure a rescue block takes is no failure of the host: a real ansible-runner run on
localhost (connection local), two hosts, one rescued and one not."""

import sys

from gpuboot import runner

PLAY = """- hosts: all
  gather_facts: false
  tasks:
    - name: T1 | PATCH | fail on every host
      block:
        - name: T1 | PATCH | fail on every host
          ansible.builtin.fail:
            msg: broken on {{ inventory_hostname }}
      rescue:
        - name: T2 | PATCH | take the failure where a rescue may
          ansible.builtin.fail:
            msg: not rescued on {{ inventory_hostname }}
          when: inventory_hostname == "unrescued"
    - name: T3 | AUDIT | go on
      ansible.builtin.debug:
        msg: still here
"""


def test_a_rescued_failure_leaves_no_failed_task_or_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / "home" / "runs"))
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    local = f"{{ansible_connection: local, ansible_python_interpreter: {sys.executable}}}"
    inv = tmp_path / "local.yml"
    inv.write_text(f"all:\n  hosts:\n    rescued: {local}\n    unrescued: {local}\n")
    result = runner.run(runner.RunSpec(playbook=play, inventory=(inv,), label="rescue"))
    rescued, unrescued = result.hosts["rescued"], result.hosts["unrescued"]
    assert unrescued.status == "failed" and unrescued.failed_task.startswith("T2")
    assert unrescued.reason == "not rescued on unrescued"
    assert rescued.status == "ok" and rescued.task.startswith("T3")
    assert (rescued.failed_task, rescued.reason) == (None, None)
