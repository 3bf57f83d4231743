"""One id space (gpuboot.ids): every task named "<ID> | AUDIT|PATCH | text", ids unique and
apart from the rules', PATCH tasks tagged with their id and the rules they make true, what a
remediation reads running with it, every id cited in code and docs real, and every certify
rule either made true by a task or listed as judged only."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from gpuboot import ids, install, paths
from gpuboot.errors import BadInput
from gpuboot.results import RunReport
from gpuboot.runner import ansible_env

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

ROOT = paths.PROJECT_DIR
# Strings of the id shape that are not ids, each with the reason.
NOT_IDS = {
    # gpuboot/stacks/README.md's plan rules: statements that gpuboot.stacks.plan.compare
    # enforces without naming them in code.
    "PLN-001": "plan rule (stacks README table)",
    "PLN-002": "plan rule (stacks README table)",
    "PLN-003": "plan rule (stacks README table)",
    "XID-079": "a made-up rule id the k8s gate's tests feed it",
    "STK-999": "no such rule: this file's own refusal case",
}
TASKS = ids.tasks()
ACTING = [t for t in TASKS if t.kind == ids.PATCH and not t.handler and not t.wrapper]


def _show(tasks) -> str:
    return "\n".join(f"  {t.where}: {t.name!r} tags={list(t.tags)}" for t in tasks)


def test_the_walker_finds_the_roles_and_the_playbook():
    roles = {t.role for t in TASKS}
    assert {"gpuboot_baseline", "nvidia_mig", "roce_qos", "gpuboot_reboot"} <= roles
    assert any(t.where.startswith("playbooks/install.yml") for t in TASKS)
    assert any(t.handler for t in TASKS)  # gpuboot_kubelet_taint's restart


def test_every_task_is_named_id_kind_text():
    bad = [t for t in TASKS if t.id is None]
    assert not bad, "not named '<ID> | AUDIT|PATCH | text':\n" + _show(bad)


def test_every_task_id_is_unique():
    counts = Counter(t.id for t in TASKS if t.id)
    dup = [t for t in TASKS if t.id and counts[t.id] > 1]
    assert not dup, "task ids used more than once:\n" + _show(dup)


def test_no_task_id_is_a_rule_id():
    # A task is never itself a rule: a task id equal to a rule's means two things.
    rules = ids.rule_ids() | ids.compat_rule_ids()
    clash = [t for t in TASKS if t.id in rules]
    assert not clash, "task ids that are also rule ids:\n" + _show(clash)


def test_patch_tasks_carry_their_id_and_the_rules_they_make_true():
    rules = ids.rule_ids()
    bad = []
    for t in ACTING:
        id_tags = [tag for tag in t.tags if ids.ID_RE.fullmatch(tag)]
        unknown = [tag for tag in id_tags if tag != t.id and tag not in rules]
        needs_rule = t.id not in ids.OUTSIDE_CERTIFY
        if t.id not in t.tags or unknown or (needs_rule and not t.rules) or t.always:
            bad.append(t)
    assert not bad, (
        "PATCH tasks must be tagged [<own id>, <certify rule ids>...] (not always):\n" + _show(bad)
    )


def test_the_exception_tables_name_real_things():
    by_id = {t.id: t for t in ACTING}
    stale = [i for i in ids.OUTSIDE_CERTIFY if i not in by_id or by_id[i].rules]
    assert not stale, f"OUTSIDE_CERTIFY names no untagged PATCH task: {stale}"
    assert set(ids.JUDGED_ONLY) <= ids.rule_ids(), set(ids.JUDGED_ONLY) - ids.rule_ids()
    fixed = set(ids.fixes()) & set(ids.JUDGED_ONLY)
    assert not fixed, f"judged only, yet a task is tagged to make them true: {fixed}"


def test_every_certify_rule_is_made_true_by_a_task_or_judged_only():
    orphan = sorted(ids.rule_ids() - set(ids.fixes()) - set(ids.JUDGED_ONLY))
    assert not orphan, f"no PATCH task makes these true, nor are they JUDGED_ONLY: {orphan}"


def test_include_wrappers_run_always_and_imports_never_do():
    # Tags on a dynamic include select the include alone: without `always` --tags <RULE>
    # never reaches the tasks inside. An import passes its tags to every task it imports.
    bad = [t for t in TASKS if t.wrapper and (t.wrapper.startswith("include") != t.always)]
    assert not bad, "include_* must be tagged always, import_* must not:\n" + _show(bad)


def _role_vars(role: str) -> dict[str, str]:
    """A role's vars/ and defaults/ variables -> their text (what they read)."""
    out: dict[str, str] = {}
    for path, doc in ids.documents():
        if not path.is_relative_to(paths.ROLES_DIR):
            continue
        rel = path.relative_to(paths.ROLES_DIR)
        if rel.parts[0] == role and rel.parts[1] in ("vars", "defaults") and isinstance(doc, dict):
            for key, value in doc.items():
                if key != "__line__":
                    out[key] = " ".join(ids._scalars(value))
    return out


def _reads(text: str, names: set[str], role_vars: dict[str, str]) -> set[str]:
    """Which of ``names`` the text reads, directly or through the role's variables."""
    seen: set[str] = set()
    todo = [text]
    found: set[str] = set()
    while todo:
        words = set(re.findall(r"\b\w+\b", todo.pop()))
        found |= words & names
        for var in (words & set(role_vars)) - seen:
            seen.add(var)
            todo.append(role_vars[var])
    return found


def test_what_a_remediation_reads_runs_with_it():
    """A task that --tags <RULE> runs must find every result it reads: the task that
    registers it runs always or under the same rules (else `undefined variable`)."""
    bad = []
    for role in sorted({t.role for t in TASKS if t.role}):
        mine = [t for t in TASKS if t.role == role and not t.handler]
        producers: dict[str, list[ids.Task]] = {}
        for t in mine:
            for name in t.registers:
                producers.setdefault(name, []).append(t)
        role_vars = _role_vars(role)
        for consumer in mine:
            if not (consumer.always or consumer.rules):
                continue  # runs only with its role: whatever it reads runs too
            for name in _reads(consumer.text, set(producers), role_vars):
                for p in producers[name]:
                    if p is consumer or p.always:
                        continue
                    if consumer.always or not set(consumer.rules) <= set(p.tags):
                        bad.append(f"{consumer.where} {consumer.id} reads {name} of {p.id}")
    assert not bad, "tag the producer always or with the reader's rules:\n  " + "\n  ".join(bad)


def _cited_files() -> list[Path]:
    """Code, docs, role files, and the tests and molecule scenarios that name tasks."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for package in (paths.PACKAGE_DIR, ROOT / "gpuboot_lab"):
        files += sorted(package.rglob("*.py")) + sorted(package.rglob("*.md"))
    files += [p for p in sorted(paths.ANSIBLE_DIR.rglob("*")) if p.is_file()]
    files += sorted((ROOT / "tests").rglob("*.py")) + sorted((ROOT / "molecule").rglob("*.yml"))
    return [p for p in files if p.is_file() and "__pycache__" not in p.parts]


def test_every_cited_id_exists():
    from gpuboot_lab.stacks import LAB_RULE  # the lab's own stack rule (LAB-001)

    known = ids.task_ids() | ids.rule_ids() | ids.compat_rule_ids() | set(NOT_IDS)
    known |= {LAB_RULE.id}
    missing = []
    for path in _cited_files():
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for cited in ids.ID_RE.findall(line):
                if cited not in known:
                    missing.append(f"{path.relative_to(ROOT)}:{n}: {cited}")
    assert not missing, "ids cited that no task or rule has:\n  " + "\n  ".join(missing)


def test_install_accepts_rule_ids_and_refuses_judged_only_ones():
    install.check_tags(("STK-002", "NIC-002,MIG-001", "MIG-010", "baseline"))
    assert {t.id for t in ACTING} <= install.known_tags()
    with pytest.raises(BadInput, match="no task makes that rule true"):
        install.check_tags(("NIC-001",))
    with pytest.raises(BadInput, match="names no tag"):
        install.check_tags(("STK-999",))


def test_the_report_links_a_failed_rule_to_the_tasks_that_fix_it():
    report = {
        "nodes": [
            {
                "host": "n1",
                "findings": [
                    {"rule": "STK-002", "status": "FAIL"},
                    {"rule": "NIC-001", "status": "FAIL"},
                    {"rule": "STK-003", "status": "ERROR"},
                    {"rule": "MIG-001", "status": "PASS"},
                ],
            }
        ]
    }
    linked = ids.link_report(RunReport.from_dict(report), "/srv/site inv.yml")
    stk2, nic1, stk3, mig1 = linked.to_dict()["nodes"][0]["findings"]
    assert stk2["fix_tasks"] == list(ids.fixes()["STK-002"]) and stk2["fix_tasks"]
    # a complete command: the run's inventory (quoted) and the node
    assert stk2["remediate"] == "gpuboot install -i '/srv/site inv.yml' --limit n1 --tags STK-002"
    assert nic1["fix_tasks"] == [] and "remediate" not in nic1  # hardware: no task fixes it
    assert "fix_tasks" not in stk3 and "fix_tasks" not in mig1  # harness fault, passed


def _listed(tags: str, tmp: Path) -> list[tuple[str, set[str]]]:
    """(task name, tags) Ansible itself would run from the install playbook with --tags."""
    env = {**os.environ, **ansible_env(tmp)}  # the roles and collection paths install uses
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            "localhost,",
            "--list-tasks",
            "--tags",
            tags,
            str(paths.PLAYBOOKS_DIR / "install.yml"),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = []
    for line in proc.stdout.splitlines():
        m = re.match(r"\s+(?=\S)(?!play #)(?:\S+ : )?(.+?)\s+TAGS: \[(.*)\]$", line)
        if m:
            out.append((m[1], {t.strip() for t in m[2].split(",") if t.strip()}))
    return out


# (rule, a task Ansible lists under --tags rule).
@pytest.mark.parametrize(
    ("rule", "runs"),
    [
        (
            "STK-002",
            "DRV-010 | PATCH | Install, pin and hold the driver at exactly the stack's version",
        ),
        (
            "NIC-002",
            "QOS-011 | PATCH | Set trust, PFC and ECN of every RoCE rail on the profile's "
            "priorities",
        ),
    ],
)
def test_ansible_runs_the_remediation_and_nothing_else(rule, runs, tmp_path):
    listed = _listed(rule, tmp_path)
    by_name = {t.name: t for t in TASKS}
    assert runs in [name for name, _ in listed], listed
    stray = [(n, tags) for n, tags in listed if rule not in tags and "always" not in tags]
    assert not stray, f"--tags {rule} would also run: {stray}"
    audits_only = [n for n, tags in listed if rule not in tags and " | PATCH | " in n]
    wrappers = {t.name for t in TASKS if t.wrapper}
    assert set(audits_only) <= wrappers, f"PATCH tasks run always: {audits_only}"
    assert not any(n.startswith("CONV-") for n, _ in listed)  # the fast path stays out
    implicit = "Validating arguments against arg spec"  # Ansible's own, tagged always
    assert all(n in by_name for n, _ in listed if not n.startswith(implicit)), listed


def test_no_task_name_carries_one_hosts_variables():
    """Ansible templates a task's name once, with the first host's variables, and shows it
    over every host's result: in a mixed-stack run a version in the name would head another
    stack's changes (the change lines carry each host's own versions)."""
    templated = [t.name for t in TASKS if "{{" in t.name or "{%" in t.name]
    assert not templated, templated
