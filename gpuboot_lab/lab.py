"""The lab: a simulated GPU fleet of podman containers reached over real SSH.

Every resource a lab creates (network, containers, files) is recorded in its
``lab.json`` the moment it exists, so ``down`` removes exactly those by id, even
after a failed ``up``.

A lab with halls models a fleet behind several management networks: each hall is a
network of its own that the controller cannot reach (the host keeps no address on its
bridge), served by one executor container on the lab's management network and on its
hall; the controller reaches the executors only.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from gpuboot import paths
from gpuboot.errors import BadInput, RunError
from gpuboot_lab.podman import podman, podman_json

EMULATOR_DIR = Path(__file__).resolve().parent / "emulator"
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
MAX_NODES = 64
MAX_HALLS = 8
REPO_PORT = 80
LAB_DRIVER = ("550", "550.54.15-1")  # branch and exact package version a new lab pins
LAB_DRIVER_EL = ("550", "3:550.54.15-1.el9")  # the same driver in NVIDIA's RHEL repository
# Node OSes: Debian bookworm, or its userland with real dnf/rpm and an emulated EL identity.
OSES = ("debian", "el8", "el9", "el10")
# What changes with every boot of a lab node: its PID 1's start time in clock ticks (the
# fields after the command name, which may hold spaces: starttime is the 20th of them).
LAB_BOOT_TIME_COMMAND = "sed 's/.*) //' /proc/1/stat | cut -d ' ' -f 20"
Progress = Callable[[str], None]


@dataclass
class Node:
    name: str
    ip: str
    container_id: str = ""
    os: str = "debian"  # one of OSES
    domain: str = ""  # its hall's gpuboot_domain; "" on the management network

    @property
    def family(self) -> str:
        return "debian" if self.os == "debian" else "redhat"


@dataclass
class Hall:
    """One hall: its network (the controller has no address on it) and its executor,
    reached by the controller at ``executor_ip`` on the management network."""

    domain: str
    network_id: str = ""
    subnet: str = ""
    repo_ip: str = ""  # the package repository's address in this hall
    executor_ip: str = ""
    executor_hall_ip: str = ""
    executor_container_id: str = ""

    @property
    def executor(self) -> str:
        return f"{self.domain}-executor"


@dataclass
class Lab:
    name: str
    profile: str
    nodes: list[Node] = field(default_factory=list)
    network_id: str = ""
    subnet: str = ""
    repo_container_id: str = ""
    stack: str | None = None  # gpuboot_stack of every node; None pins the driver alone
    halls: list[Hall] = field(default_factory=list)

    @property
    def dir(self) -> Path:
        return paths.labs_dir() / self.name

    @property
    def inventory(self) -> Path:
        return self.dir / "inventory.yml"

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / "lab.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(self.dir / "lab.json")

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        known = ", ".join(n.name for n in self.nodes)
        raise BadInput(f"no node {name!r} in lab {self.name!r}", hint=f"nodes are: {known}")

    def hall(self, domain: str) -> Hall:
        return next(h for h in self.halls if h.domain == domain)


def _check_name(name: str) -> None:
    if not NAME_RE.match(name):
        raise BadInput(
            f"invalid lab name {name!r}",
            hint="use 1-31 characters: lower-case letters, digits and '-', starting with a letter",
        )


def load(name: str) -> Lab:
    _check_name(name)
    state = paths.labs_dir() / name / "lab.json"
    if not state.exists():
        raise BadInput(
            f"no lab named {name!r}",
            where=str(state),
            hint="`gpuboot lab status` lists the labs; `gpuboot lab up` creates one",
        )
    data = json.loads(state.read_text())
    data["nodes"] = [Node(**n) for n in data.get("nodes", [])]
    data["halls"] = [Hall(**h) for h in data.get("halls", [])]
    return Lab(**data)


def names() -> list[str]:
    root = paths.labs_dir()
    return sorted(p.parent.name for p in root.glob("*/lab.json")) if root.exists() else []


def _keygen(path: Path, comment: str) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path.with_suffix(".pub").read_text().split()[:2]  # type: ignore[return-value]


def parse_os(spec: str) -> list[str]:
    """``--os debian,el9`` -> ['debian', 'el9']: the OSes nodes take in turn."""
    oses = [part.strip() for part in spec.split(",")]
    bad = [o for o in oses if o not in OSES]
    if bad or not oses:
        raise BadInput(
            f"--os {spec!r}: unknown OS {', '.join(bad) or '(empty)'}",
            hint=f"one or a comma list of {', '.join(OSES)} (nodes take them in turn)",
        )
    return oses


def up(
    name: str,
    nodes: int,
    profile: str,
    progress: Progress = lambda _: None,
    stack: str | None = None,
    os_spec: str = "debian",
    proc: Path = Path("/proc"),
    halls: int = 0,
) -> Lab:
    """Create a lab of ``nodes`` emulated ``profile`` servers; return it when SSH answers.

    ``os_spec`` names the nodes' OS (``el9``) or OSes taken in turn (``debian,el9``);
    ``proc`` is where the inotify preflight reads the limit and the instances held;
    ``halls`` > 0 splits the nodes over that many halls, each with its executor.
    """
    from gpuboot.profiles import load_profile
    from gpuboot_lab.image import ensure_el_image, ensure_image
    from gpuboot_lab.repo_server import ensure_repo, ensure_rpm_repo

    _check_name(name)
    oses = parse_os(os_spec)
    if not 1 <= nodes <= MAX_NODES:
        raise BadInput(f"--nodes {nodes} is out of range", hint=f"ask for 1 to {MAX_NODES} nodes")
    if not 0 <= halls <= min(MAX_HALLS, nodes):
        raise BadInput(
            f"--halls {halls} is out of range for {nodes} node(s)",
            hint=f"ask for 0 (no halls) to {min(MAX_HALLS, nodes)} halls: each hall needs a node",
        )
    node_oses = [oses[i % len(oses)] for i in range(nodes)]
    families = tuple(sorted({"debian" if o == "debian" else "redhat" for o in node_oses}))
    hw_profile = load_profile(profile)
    if stack is not None:
        from gpuboot.stacks import load_stack, require_compatible
        from gpuboot_lab.stacks import require_served

        stack_doc = load_stack(stack)
        require_compatible(stack_doc, hw_profile, where=f"--stack {stack}")
        require_served(stack_doc, where=f"--stack {stack}", families=families)
    if (paths.labs_dir() / name / "lab.json").exists():
        raise BadInput(
            f"lab {name!r} already exists",
            hint=f"`gpuboot lab down --name {name}` first, or pick another --name",
        )
    from gpuboot_lab.inotify import require_room

    require_room(nodes + halls, proc)  # else the last nodes' sshd never starts: refuse before any
    if shutil.which("ssh-keygen") is None:
        raise RunError("ssh-keygen is not installed", hint="run `make setup`")

    with _shared_parts_lock():  # two `lab up`s at once (parallel tests) build them once
        progress("node image: checking (first build takes about 90 s)")
        images = {"debian": ensure_image()}
        for os_name in sorted(set(node_oses) - {"debian"}):
            progress(f"{os_name} node image: checking (first build takes about 30 s more)")
            images[os_name] = ensure_el_image(os_name.removeprefix("el"))
        progress("package repository: checking")
        repo = ensure_repo()
        rpm_repo = None
        if "redhat" in families:
            progress("rpm repository: checking (first build takes about 20 s)")
            rpm_repo = ensure_rpm_repo()

    lab = Lab(name=name, profile=hw_profile["name"], stack=stack)
    lab.halls = [Hall(domain=f"hall-{chr(ord('a') + i)}") for i in range(halls)]
    lab.dir.mkdir(parents=True, exist_ok=True)
    lab.save()
    try:
        _create(lab, node_oses, images, (repo, rpm_repo), hw_profile, progress)
    except BaseException:
        progress("bring-up failed: removing what was created")
        down(name)
        raise
    return lab


@contextlib.contextmanager
def _shared_parts_lock() -> Iterator[None]:
    """Hold the lock on the parts every lab shares (node images, package repositories):
    they are built in place under GPUBOOT_HOME, and a second builder would race the first."""
    path = paths.home() / "lab-parts.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _create(
    lab: Lab,
    node_oses: list[str],
    images: dict[str, str],
    repos: tuple,
    hw_profile: dict,
    progress: Progress,
) -> None:
    repo, rpm_repo = repos
    ssh_dir = lab.dir / "ssh"
    ssh_dir.mkdir(mode=0o700)
    _keygen(ssh_dir / "id_ed25519", f"gpuboot-lab-{lab.name}")
    (lab.dir / "profile.json").write_text(json.dumps(hw_profile, indent=2))

    net_name = f"gpuboot-{lab.name}"
    lab.subnet = _network(lab, lab, net_name)
    hosts = list(ipaddress.ip_network(lab.subnet).hosts())
    repo_ip = str(hosts[1])  # .1 is the gateway
    hall_hosts = {}
    for k, hall in enumerate(lab.halls):
        hall.subnet = _network(lab, hall, _hall_network(lab, hall))
        hall_hosts[hall.domain] = list(ipaddress.ip_network(hall.subnet).hosts())
        hall.repo_ip, hall.executor_hall_ip = (str(a) for a in hall_hosts[hall.domain][1:3])
        hall.executor_ip = str(hosts[4 + k])
        lab.save()
    lab.nodes = []
    for i, os_name in enumerate(node_oses, start=1):
        # halls hold contiguous blocks of nodes: hall-a the first ones
        domain = lab.halls[(i - 1) * len(lab.halls) // len(node_oses)].domain if lab.halls else ""
        ip = str(hall_hosts[domain][9 + i] if domain else hosts[9 + i])
        lab.nodes.append(Node(name=f"node{i}", ip=ip, os=os_name, domain=domain))
    lab.save()

    if lab.halls:  # the repository serves every hall, from an address in each
        repo_nets = [f"{_hall_network(lab, h)}:ip={h.repo_ip}" for h in lab.halls]
        progress(f"{len(lab.halls)} halls; starting the package repository in each")
    else:
        repo_nets = [f"{net_name}:ip={repo_ip}"]
        progress(f"network {net_name} {lab.subnet}; starting the package repository at {repo_ip}")
    lab.repo_container_id = podman(
        "run",
        "-d",
        "--name",
        f"gpuboot-{lab.name}-repo",
        *(arg for net in repo_nets for arg in ("--network", net)),
        "--label",
        f"gpuboot.lab={lab.name}",
        "-v",
        f"{repo.out_dir}:/srv/repo:ro",
        images["debian"],
        "python3",
        "-m",
        "http.server",
        str(REPO_PORT),
        "--directory",
        "/srv/repo",
    ).stdout.strip()
    lab.save()

    known_hosts = []
    for hall in lab.halls:  # their keys first: every executor knows every node's and its own
        hall_dir = lab.dir / "executors" / hall.executor
        hall_dir.mkdir(parents=True)
        keytype, key = _keygen(hall_dir / "ssh_host_ed25519_key", hall.executor)
        known_hosts.append(f"{hall.executor_ip} {keytype} {key}")
    for node in lab.nodes:
        node_dir = lab.dir / "nodes" / node.name
        node_dir.mkdir(parents=True)
        keytype, key = _keygen(node_dir / "ssh_host_ed25519_key", node.name)
        known_hosts.append(f"{node.ip} {keytype} {key}")
        progress(f"{node.name}: starting at {node.ip} ({node.os}{_in_hall(node)})")
        node_net = _hall_network(lab, lab.hall(node.domain)) if node.domain else net_name
        node.container_id = podman(
            "run",
            "-d",
            "--name",
            f"gpuboot-{lab.name}-{node.name}",
            "--hostname",
            node.name,
            "--network",
            node_net,
            "--ip",
            node.ip,
            "--systemd=always",
            # A reboot inside the node (systemd as PID 1 gets `shutdown -r`) ends the
            # container with exit code 0; podman starts it again, as the firmware would.
            # `podman stop`/`rm -f` (lab down) mark it stopped by the user: no restart.
            "--restart=always",
            "--label",
            f"gpuboot.lab={lab.name}",
            "-v",
            f"{EMULATOR_DIR}:/opt/gpuemu:ro",
            "-v",
            f"{lab.dir / 'profile.json'}:/etc/gpuemu/profile.json:ro",
            "-v",
            f"{node_dir / 'ssh_host_ed25519_key'}:/etc/ssh/ssh_host_ed25519_key:ro",
            "-v",
            f"{node_dir / 'ssh_host_ed25519_key.pub'}:/etc/ssh/ssh_host_ed25519_key.pub:ro",
            "-v",
            f"{ssh_dir / 'id_ed25519.pub'}:/root/.ssh/authorized_keys:ro",
            images[node.os],
        ).stdout.strip()
        lab.save()
    (ssh_dir / "known_hosts").write_text("\n".join(known_hosts) + "\n")
    for hall in lab.halls:
        progress(f"{hall.executor}: starting at {hall.executor_ip} and {hall.executor_hall_ip}")
        keys = [r.public_key_path for r in (repo, rpm_repo) if r is not None]
        _start_executor(lab, hall, net_name, images["debian"], keys)
    for hall in lab.halls:
        _isolate(hall)
    _write_inventory(lab, repo, rpm_repo, repo_ip, hw_profile)
    progress("waiting for sshd on every node")
    wait_for_ssh(lab, lab.nodes, timeout=90)


def _network(lab: Lab, owner: Lab | Hall, net_name: str) -> str:
    """Create an internal network, its id recorded on ``owner`` at once; its subnet."""
    owner.network_id = podman(
        "network", "create", "--internal", "--label", f"gpuboot.lab={lab.name}", net_name
    ).stdout.strip()
    lab.save()
    return podman_json("network", "inspect", owner.network_id)[0]["subnets"][0]["subnet"]


def _hall_network(lab: Lab, hall: Hall) -> str:
    return f"gpuboot-{lab.name}-{hall.domain}"


def _in_hall(node: Node) -> str:
    return f", in {node.domain}" if node.domain else ""


def _start_executor(lab: Lab, hall: Hall, net_name: str, image: str, repo_keys: list[Path]) -> None:
    """The hall's execution node: on the management network and on its hall, reached by
    the controller over SSH with the lab's key; it knows the hall nodes' host keys
    (/etc/ssh/ssh_known_hosts), so its SSH to them checks them as the controller's does.
    The repositories' public keys sit at the paths the inventory names: the play's file
    lookups read them where it runs, on the executor."""
    ssh_dir, hall_dir = lab.dir / "ssh", lab.dir / "executors" / hall.executor
    hall.executor_container_id = podman(
        "run",
        "-d",
        "--name",
        f"gpuboot-{lab.name}-{hall.executor}",
        "--hostname",
        hall.executor,
        "--network",
        f"{net_name}:ip={hall.executor_ip}",
        "--network",
        f"{_hall_network(lab, hall)}:ip={hall.executor_hall_ip}",
        "--systemd=always",
        "--label",
        f"gpuboot.lab={lab.name}",
        "-v",
        f"{hall_dir / 'ssh_host_ed25519_key'}:/etc/ssh/ssh_host_ed25519_key:ro",
        "-v",
        f"{hall_dir / 'ssh_host_ed25519_key.pub'}:/etc/ssh/ssh_host_ed25519_key.pub:ro",
        "-v",
        f"{ssh_dir / 'id_ed25519.pub'}:/root/.ssh/authorized_keys:ro",
        "-v",
        f"{ssh_dir / 'known_hosts'}:/etc/ssh/ssh_known_hosts:ro",
        *(arg for key in repo_keys for arg in ("-v", f"{key}:{key}:ro")),
        image,
    ).stdout.strip()
    lab.save()


def _isolate(hall: Hall) -> None:
    """Take the controller's addresses off the hall's bridge: an --internal network still
    gives the host its gateway address, hence a route into the hall. Without one, the
    host has no address and no route there; the hall's containers still reach each other
    on the bridge (netavark adds the address only when it creates the bridge)."""
    interface = podman_json("network", "inspect", hall.network_id)[0]["network_interface"]
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,15}", interface):
        raise RunError(f"podman names the bridge of {hall.domain} {interface!r}")
    done = subprocess.run(
        ["ip", "-4", "addr", "flush", "dev", interface], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RunError(
            f"could not take the controller's address off {interface} ({hall.domain}): "
            f"{done.stderr.strip()}",
            hint="a lab with halls needs root (the host's addresses on its bridges)",
        )
    Path(f"/proc/sys/net/ipv6/conf/{interface}/disable_ipv6").write_text("1\n")


def _os_vars(node: Node, lab: Lab, repo, rpm_repo, repo_ip: str) -> dict:
    """The variables that depend on a node's OS: its family, package names, repository."""
    branch, version = LAB_DRIVER if node.family == "debian" else LAB_DRIVER_EL
    driver = {} if lab.stack else {"nvidia_driver_branch": branch, "nvidia_driver_version": version}
    if node.family == "debian":
        return {
            **driver,
            "gpuboot_probe_tools_packages": ["gpuboot-probes=0.6-1"],
            "gpuboot_apt_repo_url": f"http://{repo_ip}/",
            "gpuboot_apt_repo_suite": repo.suite,
            "gpuboot_apt_repo_components": repo.component,
            "gpuboot_apt_repo_key_file": str(repo.public_key_path),
        }
    major = node.os.removeprefix("el")
    return {
        "gpuboot_os_family": "redhat",
        **driver,
        "gpuboot_probe_tools_packages": ["gpuboot-probes-0.6-1"],
        "gpuboot_dnf_repo_url": f"http://{repo_ip}/{rpm_repo.url_path(major)}",
        "gpuboot_dnf_repo_key_file": str(rpm_repo.public_key_path),
    }


def _write_inventory(lab: Lab, repo, rpm_repo, repo_ip: str, hw_profile: dict) -> None:
    ssh_dir = lab.dir / "ssh"
    per_node = {
        n.name: _os_vars(
            n, lab, repo, rpm_repo, lab.hall(n.domain).repo_ip if n.domain else repo_ip
        )
        for n in lab.nodes
    }
    # What every node shares goes to all.vars (a one-OS lab's inventory reads as before);
    # the rest are host vars.
    shared = {
        key: value
        for key, value in per_node[lab.nodes[0].name].items()
        if all(key in v and v[key] == value for v in per_node.values())
    }
    inventory = {
        "all": {
            "vars": {
                "ansible_user": "root",
                "ansible_python_interpreter": "/usr/bin/python3",
                "ansible_ssh_private_key_file": str(ssh_dir / "id_ed25519"),
                # Host keys are checked against the keys the lab generated for each node.
                "ansible_ssh_common_args": (
                    f"-o UserKnownHostsFile={ssh_dir / 'known_hosts'} "
                    "-o StrictHostKeyChecking=yes -o BatchMode=yes"
                ),
                "gpuboot_profile": lab.profile,
                **({"gpuboot_stack": lab.stack} if lab.stack else {}),
                # The lab's kernel is the host's: roles must not try to install or hold one.
                "gpuboot_baseline_manage_kernel": False,
                # The lab's stand-in for a site-built nvbandwidth/nccl-tests package.
                "gpuboot_probe_tools_enabled": True,
                # Written out (not only derived by `gpuboot install`) so molecule's plain
                # ansible-playbook runs configure the same RoCE rails.
                "gpuboot_roce_interfaces": [
                    n["netdev"]
                    for n in hw_profile["hardware"].get("nics", [])
                    if n.get("link_layer") == "Ethernet"
                ],
                # The emulated kernel exposes its /proc and /sys views here.
                "gpuboot_procfs": "/run/gpuemu/proc",
                "gpuboot_sysfs": "/run/gpuemu/sys",
                # A container sees the host's boot_id, which never changes: a reboot of
                # the node shows as a new start time of its PID 1 (/proc/1/stat field 22).
                "gpuboot_reboot_boot_time_command": LAB_BOOT_TIME_COMMAND,
                **shared,
            },
            "children": {
                "gpu_nodes": {
                    "hosts": {
                        n.name: {
                            "ansible_host": n.ip,
                            **{k: v for k, v in per_node[n.name].items() if k not in shared},
                            **_hall_vars(n),
                        }
                        for n in lab.nodes
                    },
                },
                **_executors_group(lab),
            },
        },
    }
    header = (
        f"# Written by `gpuboot lab up --name {lab.name}`: a normal Ansible inventory for\n"
        f"# {len(lab.nodes)} emulated {lab.profile} node(s) "
        f"({', '.join(sorted({n.os for n in lab.nodes}))}). Removed by `gpuboot lab down`.\n"
    )
    lab.inventory.write_text(header + yaml.safe_dump(inventory, sort_keys=False))


def _hall_vars(node: Node) -> dict:
    """A hall node's domain, and the SSH its executor makes: host keys checked against the
    executor's /etc/ssh/ssh_known_hosts (the lab's), the controller's file being out of reach."""
    if not node.domain:
        return {}
    return {
        "gpuboot_domain": node.domain,
        "ansible_ssh_common_args": "-o StrictHostKeyChecking=yes -o BatchMode=yes",
    }


def _executors_group(lab: Lab) -> dict:
    if not lab.halls:
        return {}
    return {
        "gpuboot_executors": {
            "hosts": {
                h.executor: {"ansible_host": h.executor_ip, "gpuboot_executor_domains": [h.domain]}
                for h in lab.halls
            },
        },
    }


# Which of argv's addresses gave no SSH banner before the deadline (argv[1] seconds): run
# by the controller's Python, or inside a hall's executor, the only way into the hall.
SSH_WAIT = """
import socket, sys, time
pending, deadline = set(sys.argv[2:]), time.monotonic() + float(sys.argv[1])
while pending and time.monotonic() < deadline:
    for ip in sorted(pending):
        try:
            with socket.create_connection((ip, 22), timeout=1) as s:
                s.settimeout(2)
                if s.recv(4).startswith(b"SSH-"):
                    pending.discard(ip)
        except OSError:
            pass
    if pending:
        time.sleep(0.1)
print(" ".join(sorted(pending)))
"""


def _no_ssh(ips: list[str], timeout: float, executor_id: str = "") -> list[str]:
    args = ("-c", SSH_WAIT, str(timeout), *ips)
    if executor_id:
        return podman("exec", executor_id, "python3", *args, timeout=timeout + 60).stdout.split()
    done = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout + 60, check=True
    )
    return done.stdout.split()


def wait_for_ssh(lab: Lab, nodes: list[Node], timeout: float) -> None:
    """Each node's sshd answers, seen from where it is reached: the controller, or its
    hall's executor; the executors (on the management network) too."""
    pending = _no_ssh(
        [h.executor_ip for h in lab.halls] + [n.ip for n in nodes if not n.domain], timeout
    )
    for hall in lab.halls:
        ips = [n.ip for n in nodes if n.domain == hall.domain]
        if ips:
            pending += _no_ssh(ips, timeout, hall.executor_container_id)
    if pending:
        raise RunError(
            f"sshd did not answer on {', '.join(pending)} within {timeout:.0f}s",
            hint="`gpuboot lab status` and `podman logs` on the node's container; a node's "
            "journal saying 'Failed to create inotify object' means too many nodes run at once "
            "for fs.inotify.max_user_instances (128 by default): take labs down or raise it",
        )


def down(name: str) -> dict:
    """Remove every container, the network and the files of lab ``name`` (by id)."""
    lab = load(name)
    removed = []
    ids = [n.container_id for n in lab.nodes] + [lab.repo_container_id]
    ids = [i for i in ids + [h.executor_container_id for h in lab.halls] if i]
    if ids:
        podman("rm", "-f", "-t", "0", "--ignore", *ids)
        removed += ids
    for network_id in [lab.network_id] + [h.network_id for h in lab.halls]:
        if network_id:
            podman("network", "rm", "-f", network_id, check=False)
            removed.append(network_id)
    shutil.rmtree(lab.dir)
    return {"lab": name, "removed": removed}


def status(name: str | None = None) -> list[dict]:
    result = []
    for lab_name in [name] if name else names():
        lab = load(lab_name)
        states = {}
        ids = [n.container_id for n in lab.nodes if n.container_id]
        ids += [h.executor_container_id for h in lab.halls if h.executor_container_id]
        if ids:
            out = podman("inspect", "--format", "{{.Id}} {{.State.Status}}", *ids, check=False)
            states = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
        result.append(
            {
                "lab": lab.name,
                "profile": lab.profile,
                "subnet": lab.subnet,
                "inventory": str(lab.inventory),
                "nodes": [
                    {
                        "name": n.name,
                        "ip": n.ip,
                        "os": n.os,
                        **({"domain": n.domain} if n.domain else {}),
                        "state": states.get(n.container_id, "missing"),
                    }
                    for n in lab.nodes
                ],
                "executors": [
                    {
                        "name": h.executor,
                        "ip": h.executor_ip,
                        "domain": h.domain,
                        "state": states.get(h.executor_container_id, "missing"),
                    }
                    for h in lab.halls
                ],
            }
        )
    return result


def reboot(name: str, node: str, timeout: float = 90) -> None:
    """Power-cycle one node: volatile state (/run: loaded modules, kernel log, QoS) is
    lost, installed packages and faults marked --survive-reboot stay."""
    lab = load(name)
    target = lab.node(node)
    podman("restart", "-t", "10", target.container_id, timeout=timeout + 30)
    wait_for_ssh(lab, [target], timeout=timeout)


def emulator_ctl(name: str, node: str, *args: str) -> str:
    """Drive a node's emulated hardware through its back door (podman exec, not SSH)."""
    target = load(name).node(node)
    proc = podman("exec", target.container_id, "/opt/gpuemu/gpuemu", "ctl", *args, check=False)
    if proc.returncode == 2:
        raise BadInput(
            proc.stderr.strip() or proc.stdout.strip(),
            where=f"lab {name} {node}",
            hint="`gpuboot lab fault --help` lists fault kinds",
        )
    if proc.returncode != 0:
        raise RunError(f"emulator on {node}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout
