"""An ssh, scp or sftp setting that would run a program on the controller is refused from
every source Ansible or gpuboot reads (the inventory and its group_vars, the environment,
the ansible.cfg Ansible finds), in every spelling ssh accepts, before any host is touched;
unless the inventory's gpuboot_allow_ssh_options names it."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from gpuboot import cli
from gpuboot.errors import ConfigError
from gpuboot.inventory import load_inventory, ssh_programs
from gpuboot.inventory.connection import check_connection

INV = Path("/srv/inv/site.yml")
GOOD_VARS = (
    "gpuboot_profile: hgx-h100-sxm-8gpu\n"
    'nvidia_driver_branch: "550"\n'
    'nvidia_driver_version: "550.54.15-1"\n'
)
AMBIENT = (
    "ANSIBLE_SSH_ARGS",
    "ANSIBLE_SSH_COMMON_ARGS",
    "ANSIBLE_SSH_EXTRA_ARGS",
    "ANSIBLE_SCP_EXTRA_ARGS",
    "ANSIBLE_SFTP_EXTRA_ARGS",
    "ANSIBLE_SSH_EXECUTABLE",
    "ANSIBLE_PARAMIKO_PROXY_COMMAND",
    "ANSIBLE_CONFIG",
)


@pytest.fixture(autouse=True)
def no_ambient_config(tmp_path, monkeypatch):
    """No ansible.cfg or ANSIBLE_SSH_* of this machine or user: each test sets its own."""
    for var in AMBIENT:
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    cwd = tmp_path / "cwd"
    cwd.mkdir(mode=0o700)
    monkeypatch.chdir(cwd)
    if Path("/etc/ansible/ansible.cfg").exists():
        pytest.skip("this machine has /etc/ansible/ansible.cfg: Ansible would read it")
    return cwd


def refusal(hostvars: dict) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        check_connection(INV, "node1", hostvars)
    return err.value


# Every spelling ssh reads as an option that runs (or loads) a program on the controller,
# and the name that allows it.
SSH_SPELLINGS = [
    ("-o ProxyCommand=nc %h %p", "ProxyCommand"),
    ("-o 'ProxyCommand nc %h %p'", "ProxyCommand"),
    ("-oProxyCommand=touch /tmp/x", "ProxyCommand"),
    ("-o proxycommand=touch", "ProxyCommand"),
    ("-o PROXYCOMMAND=touch", "ProxyCommand"),
    ("-o ' ProxyCommand=touch'", "ProxyCommand"),
    ("-o '\"ProxyCommand\" touch'", "ProxyCommand"),
    ("-o=ProxyCommand=touch", "ProxyCommand"),
    ("-o ' = ProxyCommand touch'", "ProxyCommand"),
    ("-o 'Proxy\"Command\" touch'", "ProxyCommand"),
    ("-4o ProxyCommand=touch", "ProxyCommand"),
    ("-4oProxyCommand=touch", "ProxyCommand"),
    ("-C -o StrictHostKeyChecking=yes -o ProxyCommand=touch", "ProxyCommand"),
    ("-o ProxyUseFdpass=yes", "ProxyUseFdpass"),
    ("-o LocalCommand=touch", "LocalCommand"),
    ("-o PermitLocalCommand=yes", "PermitLocalCommand"),
    ("-o KnownHostsCommand=/tmp/x", "KnownHostsCommand"),
    ("-o 'Match exec \"touch /tmp/x\"'", "Match"),
    ("-o 'Host *'", "Host"),
    ("-o Include=/tmp/x.conf", "Include"),
    ("-o PKCS11Provider=/tmp/x.so", "PKCS11Provider"),
    ("-I /tmp/x.so", "PKCS11Provider"),
    ("-o SmartcardDevice=/tmp/x.so", "PKCS11Provider"),
    ("-o SecurityKeyProvider=/tmp/x.so", "SecurityKeyProvider"),
    ("-o XAuthLocation=/tmp/x", "XAuthLocation"),
    ("-F /tmp/ssh_config", "-F"),
    ("-F/tmp/ssh_config", "-F"),
    ("-vF /tmp/ssh_config", "-F"),
]


@pytest.mark.parametrize(
    "var", ["ansible_ssh_common_args", "ansible_ssh_extra_args", "ansible_ssh_args"]
)
@pytest.mark.parametrize(("args", "name"), SSH_SPELLINGS, ids=[s for s, _ in SSH_SPELLINGS])
def test_every_spelling_of_a_command_option_is_refused(var, args, name):
    err = refusal({var: args})
    assert err.where == f"{INV}: node1.{var}"
    assert f"({name}:" in err.message and "run a program on the controller" in err.message
    assert f"gpuboot_allow_ssh_options: [{name}]" in (err.hint or "")


@pytest.mark.parametrize(
    ("var", "args", "name"),
    [
        ("ansible_scp_extra_args", "-S /tmp/not-ssh", "-S"),
        ("ansible_scp_extra_args", "-oProxyCommand=touch", "ProxyCommand"),
        ("ansible_scp_extra_args", "-F /tmp/cfg", "-F"),
        ("ansible_sftp_extra_args", "-D /tmp/sftp-server", "-D"),
        ("ansible_sftp_extra_args", "-S/tmp/not-ssh", "-S"),
        ("ansible_sftp_extra_args", "-o LocalCommand=x", "LocalCommand"),
        ("ansible_ssh_executable", "/tmp/not-ssh", "ssh_executable"),
        ("ansible_paramiko_proxy_command", "nc %h %p", "ProxyCommand"),
    ],
)
def test_scp_sftp_paramiko_and_the_ssh_executable_are_refused(var, args, name):
    err = refusal({var: args})
    assert err.where == f"{INV}: node1.{var}" and f"({name}:" in err.message


@pytest.mark.parametrize("args", ["-o X=y otherhost", "-o X=y -- otherhost", "-o"])
def test_ssh_arguments_that_are_not_options_are_refused(args):
    err = refusal({"ansible_ssh_common_args": args})
    assert "more than ssh options" in err.message


@pytest.mark.parametrize(
    "hostvars",
    [
        {"ansible_ssh_common_args": "-o ProxyJump=ops@jump.example.internal"},
        {"ansible_ssh_common_args": "-J jump.example.internal -o ServerAliveInterval=30"},
        {"ansible_ssh_common_args": "-o UserKnownHostsFile=/srv/kh -o StrictHostKeyChecking=yes"},
        {"ansible_ssh_extra_args": "-o 'SetEnv LC_ALL=C' -C -4"},
        {"ansible_ssh_executable": "ssh"},
    ],
)
def test_options_that_run_nothing_locally_are_accepted(hostvars):
    check_connection(INV, "node1", hostvars)


def test_an_option_allowed_by_name_is_accepted_in_any_case():
    check_connection(
        INV,
        "node1",
        {
            "ansible_ssh_common_args": "-o ProxyCommand='ssh -W %h:%p jump' -F /srv/ssh_config",
            "ansible_ssh_executable": "/opt/ssh/bin/ssh",
            "gpuboot_allow_ssh_options": ["proxycommand", "-F", "ssh_executable"],
        },
    )


def test_allowing_one_option_does_not_allow_another():
    err = refusal(
        {
            "ansible_ssh_common_args": "-o ProxyCommand=x -o LocalCommand=y",
            "gpuboot_allow_ssh_options": ["ProxyCommand"],
        }
    )
    assert "(LocalCommand:" in err.message


@pytest.mark.parametrize("allow", [["ProxyComand"], ["ProxyJump"], [1], "ProxyCommand x"])
def test_an_allow_list_naming_no_refusable_setting_is_refused(allow):
    err = refusal({"gpuboot_allow_ssh_options": allow})
    assert err.where == f"{INV}: node1.gpuboot_allow_ssh_options"
    assert "ProxyCommand" in (err.hint or "")


@pytest.mark.parametrize(
    ("var", "value", "name"),
    [
        ("ANSIBLE_SSH_ARGS", "-o ProxyCommand=touch", "ProxyCommand"),
        (
            "ANSIBLE_SSH_COMMON_ARGS",
            "-oLocalCommand=touch",
            "LocalCommand",
        ),
        ("ANSIBLE_SSH_EXTRA_ARGS", "-F /tmp/cfg", "-F"),
        ("ANSIBLE_SCP_EXTRA_ARGS", "-S /tmp/x", "-S"),
        ("ANSIBLE_SFTP_EXTRA_ARGS", "-D /tmp/x", "-D"),
        ("ANSIBLE_SSH_EXECUTABLE", "/tmp/x", "ssh_executable"),
        ("ANSIBLE_PARAMIKO_PROXY_COMMAND", "nc %h %p", "ProxyCommand"),
    ],
)
def test_the_environment_is_checked_for_every_host(monkeypatch, var, value, name):
    monkeypatch.setenv(var, value)
    err = refusal({})
    assert err.where == f"environment: {var}" and f"({name}:" in err.message
    assert "node1" in err.message
    check_connection(INV, "node1", {"gpuboot_allow_ssh_options": [name]})


@pytest.mark.parametrize(
    ("section", "key", "value", "name"),
    [
        ("ssh_connection", "ssh_args", "-o ProxyCommand=touch /tmp/x", "ProxyCommand"),
        ("ssh_connection", "ssh_common_args", "-o KnownHostsCommand=/tmp/x", "KnownHostsCommand"),
        ("ssh_connection", "ssh_extra_args", "-oproxycommand=x", "ProxyCommand"),
        ("ssh_connection", "scp_extra_args", "-S /tmp/x", "-S"),
        ("ssh_connection", "sftp_extra_args", "-D /tmp/x", "-D"),
        ("ssh_connection", "ssh_executable", "/tmp/x", "ssh_executable"),
        ("paramiko_connection", "proxy_command", "nc %h %p", "ProxyCommand"),
    ],
)
def test_the_ansible_cfg_in_the_working_directory_is_checked(
    no_ambient_config, section, key, value, name
):
    cfg = no_ambient_config / "ansible.cfg"
    cfg.write_text(f"[{section}]\n{key} = {value}\n")
    err = refusal({})
    assert err.where == f"{cfg}: [{section}] {key}" and f"({name}:" in err.message


def test_a_world_writable_directory_s_ansible_cfg_is_not_read(no_ambient_config):
    """Ansible skips it (anyone could have put it there); so does gpuboot."""
    cfg = no_ambient_config / "ansible.cfg"
    cfg.write_text("[ssh_connection]\nssh_args = -o ProxyCommand=touch /tmp/x\n")
    os.chmod(no_ambient_config, 0o777)
    check_connection(INV, "node1", {})


def test_the_ansible_config_variable_and_the_user_s_file_are_checked(
    tmp_path, monkeypatch, no_ambient_config
):
    home_cfg = tmp_path / "home" / ".ansible.cfg"
    home_cfg.write_text("[ssh_connection]\nssh_extra_args = -o LocalCommand=x\n")
    assert refusal({}).where == f"{home_cfg}: [ssh_connection] ssh_extra_args"
    named = tmp_path / "named.cfg"
    named.write_text("[ssh_connection]\nssh_args = -F /tmp/cfg\n")
    monkeypatch.setenv("ANSIBLE_CONFIG", str(named))
    assert refusal({}).where == f"{named}: [ssh_connection] ssh_args"


def test_a_comment_in_ansible_cfg_is_a_comment_as_ansible_reads_it(no_ambient_config):
    (no_ambient_config / "ansible.cfg").write_text(
        "[ssh_connection]\nssh_args = -o ControlMaster=auto ; touch /tmp/x -o ProxyCommand=x\n"
    )
    check_connection(INV, "node1", {})


def test_an_ansible_cfg_that_is_not_a_small_file_is_refused(no_ambient_config):
    os.mkfifo(no_ambient_config / "ansible.cfg")
    err = refusal({})
    assert "not a regular file" in err.message


def _site(root: Path, all_vars: str = "", node_vars: str = "{ansible_host: 192.0.2.1}") -> Path:
    (root / "group_vars").mkdir(parents=True)
    (root / "group_vars" / "all.yml").write_text(GOOD_VARS + all_vars)
    site = root / "site.yml"
    site.write_text(f"all:\n  hosts:\n    node1: {node_vars}\n    node2: {node_vars}\n")
    return site


def test_group_vars_are_checked_and_can_allow(tmp_path):
    site = _site(tmp_path / "inv", "ansible_ssh_common_args: -o ProxyCommand='nc %h %p'\n")
    with pytest.raises(ConfigError) as err:
        load_inventory(site)
    assert "ansible_ssh_common_args" in err.value.where and "(ProxyCommand:" in err.value.message
    (tmp_path / "inv" / "group_vars" / "all.yml").write_text(
        GOOD_VARS + "ansible_ssh_common_args: -o ProxyCommand='nc %h %p'\n"
        "gpuboot_allow_ssh_options: [ProxyCommand]\n"
    )
    assert sorted(load_inventory(site).hosts) == ["node1", "node2"]


@pytest.mark.parametrize("verb", ["install", "plan", "certify", "scan"])
def test_every_verb_exits_2_before_any_host(verb, guard, tmp_path, monkeypatch, capsys):
    site = _site(tmp_path / "inv")
    monkeypatch.setenv("ANSIBLE_SSH_COMMON_ARGS", "-o ProxyCommand=touch /tmp/x")
    code = cli.main([verb, "-i", str(site)])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and guard == [], err
    assert "ANSIBLE_SSH_COMMON_ARGS" in err and "ProxyCommand" in err and "hint:" in err


def _within(seconds: float, call):
    """``call()``'s exception or result, or a failed test when it blocks (a FIFO's open)."""
    out: dict = {}

    def run():
        try:
            out["value"] = call()
        except Exception as exc:  # handed back to the test
            out["value"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still reading after {seconds}s"
    return out["value"]


def test_an_ansible_cfg_linked_to_a_fifo_is_refused_without_waiting(tmp_path, monkeypatch):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "linked.cfg").symlink_to(tmp_path / "fifo")
    monkeypatch.setenv("ANSIBLE_CONFIG", str(tmp_path / "linked.cfg"))
    err = _within(10, lambda: check_connection(INV, "node1", {}))
    assert isinstance(err, ConfigError) and "is a FIFO" in err.message


def test_an_ansible_cfg_longer_than_its_size_says_is_read_no_further_than_the_cap(monkeypatch):
    """A procfs file says 0 bytes and holds more: the cap is kept while reading."""
    monkeypatch.setattr(ssh_programs, "CFG_MAX_BYTES", 1024)
    monkeypatch.setenv("ANSIBLE_CONFIG", "/proc/self/maps")  # several KiB, st_size 0
    err = refusal({})
    assert "larger than 1024 bytes" in err.message and "/maps" in err.where


def test_an_oversize_ansible_cfg_is_refused(no_ambient_config):
    (no_ambient_config / "ansible.cfg").write_text("[defaults]\n" + "# pad\n" * 200_000)
    err = refusal({})
    assert "larger than" in err.message and "ansible.cfg" in err.where


# Options that run nothing but let the node reach into the controller, or write a file there
# (OpenSSH 9.2's ssh(1) and ssh_config(5)), and the name that allows each.
REACH_SPELLINGS = [
    ("-E /etc/cron.d/x", "-E", "log"),
    ("-vE/home/op/.bashrc", "-E", "log"),
    ("-R 9000:/var/run/docker.sock", "RemoteForward", "sockets"),
    ("-o 'RemoteForward 9000 /run/podman/podman.sock'", "RemoteForward", "sockets"),
    ("-L /tmp/s:localhost:22", "LocalForward", "listen"),
    ("-o LocalForward=8080:localhost:80", "LocalForward", "listen"),
    ("-D 1080", "DynamicForward", "SOCKS"),
    ("-o DynamicForward=1080", "DynamicForward", "SOCKS"),
    ("-A", "ForwardAgent", "agent"),
    ("-4A", "ForwardAgent", "agent"),
    ("-o ForwardAgent=yes", "ForwardAgent", "agent"),
    ("-o ForwardAgent=/tmp/agent.sock", "ForwardAgent", "agent"),
    ("-X", "ForwardX11", "X display"),
    ("-Y", "ForwardX11", "X display"),
    ("-o ForwardX11Trusted=yes", "ForwardX11", "X display"),
    ("-w any", "Tunnel", "tun"),
    ("-o Tunnel=point-to-point", "Tunnel", "tun"),
    ("-o 'SendEnv=*'", "SendEnv", "environment"),
    ("-o 'SendEnv AWS_*'", "SendEnv", "environment"),
]


@pytest.mark.parametrize(
    ("args", "name", "says"), REACH_SPELLINGS, ids=[s for s, *_ in REACH_SPELLINGS]
)
def test_an_option_that_reaches_into_the_controller_is_refused(args, name, says):
    err = refusal({"ansible_ssh_common_args": args})
    assert err.where == f"{INV}: node1.ansible_ssh_common_args"
    assert f"({name}:" in err.message and says in err.message and "controller" in err.message
    assert f"gpuboot_allow_ssh_options: [{name}]" in (err.hint or "")
    check_connection(
        INV, "node1", {"ansible_ssh_common_args": args, ssh_programs.ALLOW_VAR: [name]}
    )


@pytest.mark.parametrize(
    "args",
    [
        "-o ForwardAgent=no",
        "-o 'ForwardAgent No'",
        "-o ForwardX11=no -a -x",
        "-o Tunnel=no",
        "-o UserKnownHostsFile=/dev/null -o ControlPath=/tmp/cp-%C -S /tmp/cp-%C",
        "-o IdentityFile=~/.ssh/id_ed25519 -o IdentityAgent=none -y",
    ],
)
def test_an_option_turned_off_or_reading_the_operator_s_files_is_accepted(args):
    check_connection(INV, "node1", {"ansible_ssh_common_args": args})


@pytest.mark.parametrize(
    "args",
    [
        "-J 'a$(touch /tmp/x)@jump'",
        "-J 'ops@jump;touch /tmp/x'",
        "-o 'ProxyJump=a$(id)@jump'",
        "-o 'ProxyJump ssh://ops@jump|id'",
        "-J 'jump,b`id`@jump2'",
        "-4J 'a&&id@jump'",
    ],
)
def test_a_jump_host_with_shell_characters_is_refused(args):
    """ssh 9.2 builds the jump's command with its user and host unquoted and runs it with
    the user's shell: `ssh -J 'a$(touch /tmp/x)@jump' node` creates /tmp/x."""
    err = refusal({"ansible_ssh_common_args": args})
    assert "is not [user@]host[:port]" in err.message and "ProxyJump" in err.message


@pytest.mark.parametrize(
    "args", ["-J ops@jump.example.internal:2222", "-J ssh://ops@jump,jump2", "-o ProxyJump=none"]
)
def test_a_plain_jump_host_is_accepted(args):
    check_connection(INV, "node1", {"ansible_ssh_common_args": args})


@pytest.mark.parametrize("verb", ["install", "plan", "certify", "scan"])
def test_every_verb_refuses_a_shell_in_a_jump_host_before_any_host(verb, guard, tmp_path, capsys):
    site = _site(tmp_path / "inv", "ansible_ssh_common_args: \"-J 'ops$(touch /tmp/x)@jump'\"\n")
    code = cli.main([verb, "-i", str(site)])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and guard == [], err
    assert "ansible_ssh_common_args" in err and "ProxyJump" in err and "hint:" in err
