"""The CLI's contract: exit codes, one clear error line, JSON on stdout, lazy imports."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

GOOD_HOST = "n1: {ansible_host: 127.0.0.1, ansible_port: %d}"


def gpuboot(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "gpuboot.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def assert_untouched(sock):
    with pytest.raises(BlockingIOError):
        sock.accept()


def inventory(tmp_path, text):
    path = tmp_path / "inv.yml"
    path.write_text(text)
    return str(path)


def pinned_inventory(tmp_path, listener, profile="hgx-h100-sxm-8gpu"):
    """One host (the listener nobody may contact) with a profile and a driver pin."""
    return inventory(
        tmp_path,
        f"all:\n  vars: {{gpuboot_profile: {profile}, "
        "nvidia_driver_branch: '550', nvidia_driver_version: 550.54.15-1}\n"
        "  hosts:\n    " + GOOD_HOST % listener.getsockname()[1] + "\n",
    )


@pytest.mark.parametrize("verb", ["install", "certify"])
@pytest.mark.parametrize(
    ("content", "expect"),
    [
        (None, "inventory file does not exist"),
        ("", "inventory file is empty"),
        ("all:\n  hosts: [\n", "not valid YAML"),
        ("- just\n- a list\n", "must be a mapping of groups"),
        ("all:\n  vars: {gpuboot_profile: hgx-h100-sxm-8gpu}\n", "defines no hosts"),
    ],
)
def test_bad_inventory_exits_2_with_one_line(tmp_path, verb, content, expect):
    path = str(tmp_path / "missing.yml") if content is None else inventory(tmp_path, content)
    proc = gpuboot(verb, "-i", path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert expect in lines[0] and path in lines[0] and "hint:" in lines[0]
    assert proc.stdout == ""


def test_unknown_profile_is_refused_before_any_host_is_contacted(tmp_path, listener):
    path = pinned_inventory(tmp_path, listener, profile="no-such-sku")
    proc = gpuboot("certify", "-i", path, "--json")
    assert proc.returncode == 2
    doc = json.loads(proc.stdout)
    assert "no-such-sku" in doc["error"]["message"] and "hgx-h100-sxm-8gpu" in doc["error"]["hint"]
    assert "n1.gpuboot_profile" in doc["error"]["where"]
    assert_untouched(listener)


def test_missing_driver_pin_names_host_and_key(tmp_path, listener):
    port = listener.getsockname()[1]
    path = inventory(
        tmp_path,
        "all:\n  vars: {gpuboot_profile: hgx-h100-sxm-8gpu}\n"
        "  hosts:\n    " + GOOD_HOST % port + "\n",
    )
    proc = gpuboot("install", "-i", path)
    assert proc.returncode == 2
    assert "n1.nvidia_driver_branch" in proc.stderr
    assert_untouched(listener)


@pytest.mark.parametrize("verb", ["install", "plan", "certify"])
@pytest.mark.parametrize("family", ["suse", "arch"])  # redhat is a node family
def test_node_os_family_without_a_package_path_is_refused(tmp_path, listener, verb, family):
    port = listener.getsockname()[1]
    path = inventory(
        tmp_path,
        "all:\n  vars: {gpuboot_profile: hgx-h100-sxm-8gpu, gpuboot_stack: lts-550-cuda12.4}\n"
        "  hosts:\n    " + GOOD_HOST % port + "\n"
        f"    n2: {{ansible_host: 127.0.0.1, ansible_port: {port}, gpuboot_os_family: {family}}}\n",
    )
    proc = gpuboot(verb, "-i", path, "--json")
    assert proc.returncode == 2, proc.stderr
    err = json.loads(proc.stdout)["error"]
    assert f"'{family}' is not supported" in err["message"] and "n2 (" in err["message"]
    assert "n1" not in err["message"]
    assert err["where"] == f"{path}: n2.gpuboot_os_family"
    assert "debian" in err["hint"]
    assert_untouched(listener)


def test_unknown_lab_profile_exits_2(tmp_path):
    proc = gpuboot(
        "lab",
        "up",
        "--name",
        "never",
        "--profile",
        "nope",
        "--json",
        env={"GPUBOOT_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 2
    assert "nope" in json.loads(proc.stdout)["error"]["message"]
    assert not (tmp_path / "labs" / "never").exists()


def test_usage_error_exits_2_without_traceback():
    proc = gpuboot("install")
    assert proc.returncode == 2
    assert "--inventory" in proc.stderr and "Traceback" not in proc.stderr


def test_help_does_not_import_the_heavy_stack():
    code = (
        "import sys, gpuboot.cli as c; c.build_parser().format_help(); "
        "print(sorted(m for m in ('ansible', 'ansible_runner', 'pytest', 'testinfra', 'yaml')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("module", ["gpuboot.install", "gpuboot.status"])
def test_install_and_status_do_not_import_the_rules(module):
    """They only need the report package's host order; its outputs bring every rule and
    evidence parser (0.3 s of each `gpuboot install`'s start)."""
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m.startswith("
    code += "('gpuboot.checks', 'gpuboot.evidence', 'gpuboot.report.html'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--serial", "0"], "--serial '0' is not a host count"),
        (["--max-fail", "lots"], "--max-fail 'lots' is not a host count"),
        (["--limit", "nosuchhost"], "matches no host"),
        (["--resume"], "no earlier install run"),
        (["--kubeconfig", "/nonexistent/kubeconfig"], "cannot load the kubeconfig"),
        (["--kubeconfig", "/dev/null", "--drain-timeout", "0"], "--drain-timeout 0 must be"),
    ],
)
def test_bad_rollout_options_are_refused_before_any_host(tmp_path, listener, args, expect):
    path = pinned_inventory(tmp_path, listener)
    env = {**os.environ, "GPUBOOT_RUNS": str(tmp_path / "runs")}
    proc = gpuboot("install", "-i", path, *args, env=env)
    assert proc.returncode == 2, proc.stderr
    assert expect in proc.stderr and "Traceback" not in proc.stderr
    assert_untouched(listener)
