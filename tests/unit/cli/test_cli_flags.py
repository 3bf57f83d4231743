"""Flags mean what they say, and bad ones are refused before any host is touched or a
run directory exists: --limit as Ansible reads it in every verb,
--tags, --forks, --sign-key and the output paths."""

from __future__ import annotations

import pytest

from gpuboot import cli

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

VERBS = ("install", "plan", "certify", "scan")


@pytest.fixture
def fleet(tmp_path, listener) -> str:
    """Three hosts in group gpu, all at the listener."""
    port = listener.getsockname()[1]
    path = tmp_path / "fleet.yml"
    path.write_text(
        "all:\n  vars:\n"
        "    gpuboot_profile: hgx-h100-sxm-8gpu\n"
        '    nvidia_driver_branch: "550"\n'
        '    nvidia_driver_version: "550.54.15-1"\n'
        f"    ansible_host: 127.0.0.1\n    ansible_port: {port}\n"
        "  children:\n    gpu:\n      hosts:\n        node1:\n        node2:\n        node3:\n"
    )
    return str(path)


def gpuboot(capsys, *argv) -> tuple[int, str]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().err


def no_run_dir(tmp_path) -> bool:
    runs = tmp_path / "runs"
    return not runs.exists() or not any(runs.iterdir())


def assert_refused(code, err, guard, tmp_path, *expect):
    assert code == 2, err
    assert "Traceback" not in err and all(e in err for e in expect), err
    assert guard == [] and no_run_dir(tmp_path)


# ---------------------------------------------------------------- --limit
@pytest.mark.parametrize("verb", ["certify", "scan"])
@pytest.mark.parametrize("pattern", ["node1,node3", "node1:node3", "gpu:!node2"])
def test_checks_run_on_exactly_the_hosts_ansible_selects(verb, pattern, fleet, guard, capsys):
    gpuboot(capsys, verb, "-i", fleet, "--limit", pattern)
    (what, (targets, *_), _), *_ = guard
    # the engine collects from exactly the names Ansible's pattern selected
    assert what == "certify collection" and list(targets) == ["node1", "node3"]


def test_plan_reaches_exactly_the_hosts_ansible_selects(fleet, guard, monkeypatch, capsys):
    from gpuboot import plan

    reached = []

    def record(inv, hosts):
        reached.extend(hosts)
        return {"inventory": str(inv.path), "nodes": [], "groups": []}  # stop before any ssh

    monkeypatch.setattr(plan, "plan_hosts", record)
    code, err = gpuboot(capsys, "plan", "-i", fleet, "--limit", "node1,node3")
    assert code == 0, err
    assert sorted(reached) == ["node1", "node3"]


@pytest.mark.parametrize("verb", VERBS)
def test_a_limit_matching_nothing_is_refused_by_every_verb(verb, fleet, guard, tmp_path, capsys):
    code, err = gpuboot(capsys, verb, "-i", fleet, "--limit", "nosuchhost")
    assert_refused(code, err, guard, tmp_path, "--limit 'nosuchhost' matches no host")


# ---------------------------------------------------------------- install flags
def test_tags_must_name_a_tag_of_the_playbook(fleet, guard, tmp_path, capsys):
    code, err = gpuboot(capsys, "install", "-i", fleet, "--tags", "driver,nosuchtag")
    assert_refused(code, err, guard, tmp_path, "--tags 'nosuchtag'", "known tags:", "driver")
    gpuboot(capsys, "install", "-i", fleet, "--tags", "driver,cuda", "--tags", "always")
    (what, (spec, *_), _), *_ = guard
    assert what == "ansible-runner" and spec.tags == ("driver,cuda", "always")


@pytest.mark.parametrize("forks", ["0", "-3"])
def test_forks_below_one_are_refused_before_a_run_dir(forks, fleet, guard, tmp_path, capsys):
    code, err = gpuboot(capsys, "install", "-i", fleet, "--forks", forks)
    assert_refused(code, err, guard, tmp_path, f"--forks {forks} must be at least 1")


# ---------------------------------------------------------------- certify / scan flags
def _rsa_key(path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


@pytest.mark.parametrize(
    ("make", "expect"),
    [
        (lambda d: d / "missing.pem", "cannot read signing key"),
        (lambda d: (d / "junk.pem").write_text("not a key") and d / "junk.pem", "not an "),
        (lambda d: _rsa_key(d / "rsa.pem"), "not an Ed25519 key"),
    ],
    ids=["missing", "junk", "rsa"],
)
def test_sign_key_is_loaded_before_any_host(make, expect, fleet, guard, tmp_path, capsys):
    key = make(tmp_path)
    code, err = gpuboot(capsys, "certify", "-i", fleet, "--sign-key", str(key))
    assert_refused(code, err, guard, tmp_path, expect, str(key))


def test_a_good_sign_key_lets_certify_run(fleet, guard, tmp_path, capsys):
    from gpuboot.report import certificate

    key = certificate.generate_key(tmp_path / "signing.pem")
    gpuboot(capsys, "certify", "-i", fleet, "--sign-key", str(key))
    assert [what for what, _, _ in guard] == ["certify collection"]


@pytest.mark.parametrize("verb", ["scan", "certify"])
@pytest.mark.parametrize("kind", ["missing", "a-file"])
def test_textfile_dir_is_checked_before_any_host(verb, kind, fleet, guard, tmp_path, capsys):
    target = tmp_path / kind
    if kind == "a-file":
        target.write_text("")
    code, err = gpuboot(capsys, verb, "-i", fleet, "--textfile-dir", str(target))
    assert_refused(code, err, guard, tmp_path, "--textfile-dir", "not an existing directory")


def test_calibrate_file_is_checked_before_any_host(fleet, guard, tmp_path, capsys):
    target = tmp_path / "no-such-dir" / "baseline.yml"
    code, err = gpuboot(capsys, "certify", "-i", fleet, "--calibrate", str(target))
    assert_refused(code, err, guard, tmp_path, "--calibrate", "not an existing directory")
