"""Read and check an Ansible inventory before any host is touched.

The inventory is the operator's, but its values become paths, --limit patterns, ssh
arguments on a shell line (testinfra) and package pins: each is checked against the
form it must have before anything uses it, and every file Ansible would read is
checked first for what would crash or exhaust Ansible (not UTF-8, binary, alias bombs).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gpuboot.errors import BadInput, ConfigError
from gpuboot.yamlsafe import SAFE_LOADER

if TYPE_CHECKING:
    from gpuboot.stacks.model import Stack

PROFILE_FIX = "set a SKU profile from gpuboot/profiles/ (`gpuboot lab up` writes one)"
# A host names its software either as a whole stack or, for the driver alone, as pins.
PIN_VARS = ("nvidia_driver_branch", "nvidia_driver_version")
STREAM_VAR = "nvidia_driver_module_stream"  # EL8/EL9: the driver branch's dnf module stream
PIN_FIX = (
    "set gpuboot_stack to a stack (`gpuboot matrix list`), or pin the driver alone with "
    'nvidia_driver_branch (e.g. "550") and nvidia_driver_version (e.g. "550.54.15-1")'
)

# The OS families gpuboot can converge and certify: Debian/Ubuntu (apt, dpkg) and
# RHEL/Rocky/Alma (dnf, rpm, versionlock, module streams on EL8/EL9).
NODE_OS_FAMILIES = ("debian", "redhat")

# Bounds on what one inventory or vars file may cost to read (Ansible has none: an
# alias bomb took ~100 s and ~4 GB before it failed).
MAX_FILE_BYTES = 8 << 20
MAX_YAML_VALUES = 2_000_000  # scalars and collections, once every alias is expanded
MAX_YAML_DEPTH = 200  # libyaml's composer recurses in C: far deeper nesting crashes it
MAX_FILES = 10_000  # in an inventory directory, or under one *_vars/ directory
VARS_DIRS = ("group_vars", "host_vars")
VARS_EXTS = ("", ".yml", ".yaml", ".json")  # what Ansible's host_group_vars reads
YAML_FIX = "fix the YAML; inventory/sample.yml shows the expected layout"

# A host name becomes a bundle directory, a --limit pattern and a testinfra host spec.
HOST_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}")
HOST_NAME_FIX = (
    "name hosts with letters, digits, '.', '-' and '_' (starting with a letter, digit or "
    "'_'), and put the node's address in ansible_host"
)
# ansible_host reaches ssh as an argument: never an option, never a template.
ADDRESS_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:%-]{0,252}")
USER_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
ADDRESS_VARS = ("ansible_host", "ansible_ssh_host")
PORT_VARS = ("ansible_port", "ansible_ssh_port")
USER_VARS = ("ansible_user", "ansible_ssh_user", "ansible_become_user")
# testinfra joins these unquoted into the shell line it runs ssh with.
SSH_ARG_VARS = ("ansible_ssh_common_args", "ansible_ssh_extra_args", "ansible_ssh_args")
# testinfra hands the connection password to `sshpass -p`, readable in `ps` by anyone.
PASSWORD_VARS = ("ansible_password", "ansible_ssh_pass", "ansible_ssh_password")
# A GPU node is reached over SSH: `local` (or a container or chroot plugin) would run the
# probes and the roles on the controller itself and certify the controller as the node.
SSH_CONNECTIONS = ("ssh", "smart", "paramiko", "paramiko_ssh")
PASSWORD_FIX = (
    "use SSH keys (ansible_ssh_private_key_file, or keys loaded in ssh-agent) and remove "
    "the password: gpuboot's checks would pass it to `sshpass -p`, visible in `ps`"
)
# Outside quotes a POSIX shell expands or acts on these; inside double quotes on these.
SHELL_ACTIVE = frozenset(";&|<>()$`\\#*?[]{}")
SHELL_ACTIVE_IN_DOUBLE_QUOTES = frozenset("$`\\")


@dataclass(frozen=True)
class HostView:
    """One host as every verb sees it, derived once when the inventory is loaded: its
    inventory variables, its SKU profile, its stack (None: the driver pinned alone) and the
    role variables gpuboot derives from them (derive_role_vars)."""

    name: str
    inventory_vars: dict[str, Any]  # merged group + host variables, as Ansible reads them
    profile: dict[str, Any]
    stack: Stack | None
    role_vars: dict[str, Any]

    @property
    def vars(self) -> dict[str, Any]:
        """The variables install hands the roles and certify judges with: the derived win."""
        return {**self.inventory_vars, **self.role_vars}


class _HostPatterns:
    """Ansible's parsed inventory, kept from the load: a ``--limit`` pattern is read by
    Ansible's own rules without parsing the inventory (or running its scripts) again."""

    def __init__(self, manager: Any):
        self._manager = manager
        self._lock = threading.Lock()  # subset() is state on the manager

    def match(self, pattern: str) -> list[str]:
        from ansible.errors import AnsibleError

        with self._lock:
            try:
                self._manager.subset(pattern)
                return [str(h.name) for h in self._manager.get_hosts()]
            except AnsibleError as exc:
                raise BadInput(
                    f"--limit {pattern!r} is not a host pattern Ansible can read: {exc.message}",
                    where="--limit",
                    hint="e.g. --limit node1,node3 or --limit 'gpu:!node2'",
                ) from exc
            finally:
                self._manager.subset(None)


@dataclass(frozen=True)
class Inventory:
    """The loaded, checked inventory: read once, then handed down to every verb."""

    path: Path  # absolute: ansible-runner and testinfra read it from other directories
    views: dict[str, HostView]  # host -> its view, in inventory order
    patterns: _HostPatterns = field(compare=False, repr=False)

    @cached_property
    def hosts(self) -> dict[str, dict[str, Any]]:
        """Host -> its inventory variables (group + host), without derived ones."""
        return {name: view.inventory_vars for name, view in self.views.items()}

    def resolved(self, host: str) -> dict[str, Any]:
        """The host's variables with the derived role variables applied."""
        return self.views[host].vars

    def k8s_node_names(self) -> dict[str, str]:
        """Inventory host -> Kubernetes node name, where ``gpuboot_k8s_node_name`` says so."""
        return {
            h: str(v["gpuboot_k8s_node_name"])
            for h, v in self.hosts.items()
            if "gpuboot_k8s_node_name" in v
        }


def inventory_path(path: str | Path) -> Path:
    """``-i`` made absolute once, as Ansible reads it (``~`` expanded, no link followed:
    group_vars/ beside a linked file are the ones beside the link). ansible-runner runs
    in its private data dir and testinfra in its own: a relative path loads nothing."""
    text = str(path)
    if not text.strip():
        raise ConfigError(
            "no inventory given (-i is empty)",
            where="-i",
            hint="pass -i with an inventory file or directory",
        )
    return Path(os.path.abspath(os.path.expanduser(text)))


def load_inventory(path: str | Path) -> Inventory:
    """Return the hosts and their variables, or raise ConfigError naming file, key and fix."""
    path = inventory_path(path)
    if not path.exists():
        raise ConfigError(
            "inventory file does not exist",
            where=str(path),
            hint="pass -i with an existing inventory (`gpuboot lab up` prints one)",
        )
    _check_files(path)  # before Ansible reads any of them
    hosts, groups, manager = _ansible_hosts(path)
    if not hosts:
        raise ConfigError(
            "inventory defines no hosts",
            where=str(path),
            hint="list hosts under `all: hosts:` or a group's `hosts:`",
        )
    _check_host_names(path, hosts, groups)
    for host, hostvars in hosts.items():
        _check_connection(path, host, hostvars)
    return Inventory(path=path, views=_check_hosts(path, hosts), patterns=_HostPatterns(manager))


# ---------------------------------------------------------------- the files Ansible reads
def _check_files(path: Path) -> None:
    """Every inventory source and group_vars/host_vars file Ansible would read."""
    if path.is_dir():
        for source in _counted(_inventory_files(path, set()), path):
            _check_source(source, top=False)
    else:
        _check_source(path, top=True)
    base = path if path.is_dir() else path.parent  # where Ansible looks for *_vars/
    for sub in VARS_DIRS:
        if (base / sub).is_dir():
            for file in _counted(_vars_files(base / sub, set(), top=True), base / sub):
                _check_vars_file(file)


def _counted(files, root: Path):
    """At most MAX_FILES of them: a link to / in group_vars/ must not walk the disk."""
    for count, file in enumerate(files, start=1):
        if count > MAX_FILES:
            raise ConfigError(
                f"holds more than {MAX_FILES} files",
                where=str(root),
                hint="remove what Ansible should not read (a link to a large directory?)",
            )
        yield file


def _inventory_files(directory: Path, seen: set[Path]):
    """The files Ansible parses as sources of an inventory directory (recursively,
    skipping what it ignores: hidden names, *_vars/, README.md, *.orig...)."""
    from ansible.inventory.manager import IGNORED

    real = directory.resolve()
    if real in seen:  # a link back up the tree
        return
    seen.add(real)
    for entry in sorted(directory.iterdir()):
        if IGNORED.search(os.fsencode(entry.name)):
            continue
        if entry.is_dir():
            yield from _inventory_files(entry, seen)
        else:
            yield entry


def _vars_files(directory: Path, seen: set[Path], *, top: bool):
    """The files Ansible's host_group_vars plugin may load: <entity>(.yml|.yaml|.json)
    and every file of an <entity>/ directory (no hidden or backup files; nested
    directories and files only without an extension or with a YAML one)."""
    real = directory.resolve()
    if real in seen:
        return
    seen.add(real)
    for entry in sorted(directory.iterdir()):
        if entry.name.startswith(".") or entry.name.endswith("~"):
            continue
        ext = os.path.splitext(entry.name)[1]
        if entry.is_dir():
            if top or not ext:
                yield from _vars_files(entry, seen, top=False)
        elif ext in VARS_EXTS:
            yield entry


def _check_source(file: Path, *, top: bool) -> None:
    st = _regular_file(file)
    yaml_ext = file.suffix in (".yml", ".yaml", ".json")
    if st.st_mode & 0o111 and not yaml_ext:
        return  # an inventory script: Ansible runs it, the operator's own program
    text = _read_text(file)
    if top and not text.strip():
        raise ConfigError(
            "inventory file is empty",
            where=str(file),
            hint="list hosts under `all: hosts:`; see inventory/sample.yml",
        )
    if _vaulted(text):
        return  # Ansible decrypts it; nothing to read here
    if not yaml_ext:
        # Ansible's yaml plugin also tries files without an extension; else it is INI.
        with contextlib.suppress(yaml.YAMLError):
            _check_yaml_bounds(file, text)
        return
    data = _yaml_document(file, text, "inventory")
    if not isinstance(data, dict) and (top or data is not None):
        raise ConfigError(
            "inventory must be a mapping of groups (e.g. `all:` with `hosts:`)",
            where=str(file),
            hint="see inventory/sample.yml",
        )


def _check_vars_file(file: Path) -> None:
    _regular_file(file)
    text = _read_text(file)
    if _vaulted(text):
        return
    data = _yaml_document(file, text, "variables file")
    if data is not None and not isinstance(data, dict):
        raise ConfigError(
            f"variables file is not a mapping (it holds a {type(data).__name__})",
            where=str(file),
            hint="write `name: value` lines: Ansible merges the file into its group's or "
            "host's variables",
        )


def _vaulted(text: str) -> bool:
    return text.lstrip().startswith("$ANSIBLE_VAULT;")


def _unreadable(file: Path, exc: OSError) -> ConfigError:
    return ConfigError(
        f"cannot read: {exc.strerror or exc}",
        where=str(file),
        hint="fix the path or its permissions",
    )


def _regular_file(file: Path) -> os.stat_result:
    """A FIFO or a device would hang the read or never end: only regular files."""
    try:
        st = file.stat()
    except OSError as exc:
        raise _unreadable(file, exc) from exc
    if not stat.S_ISREG(st.st_mode) or file.resolve().parts[1:2] in (("proc",), ("sys",)):
        raise ConfigError(
            "is not a regular file (a FIFO, a device or a /proc or /sys file would hang "
            "the read or never end)",
            where=str(file),
            hint="inventories and their *_vars/ hold regular files only",
        )
    return st


def _read_text(file: Path) -> str:
    """The file as UTF-8 text, at most MAX_FILE_BYTES; binary or other encodings refused."""
    try:
        with open(file, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise _unreadable(file, exc) from exc
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(
            f"file is larger than {MAX_FILE_BYTES >> 20} MiB",
            where=str(file),
            hint="split the inventory into a directory of smaller files",
        )
    if b"\0" in data:
        raise ConfigError(
            "is a binary file, not YAML or INI text",
            where=f"{file}:{_line_of(data, data.index(0))}",
            hint="remove it from the inventory (or from group_vars/host_vars)",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"is not UTF-8 text (byte 0x{data[exc.start]:02x})",
            where=f"{file}:{_line_of(data, exc.start)}",
            hint="save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)",
        ) from exc


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


class _VarsLoader(SAFE_LOADER):  # type: ignore[misc, valid-type]
    """Safe YAML that reads Ansible's own tags (!vault, !unsafe) as plain values."""


def _plain(loader, _suffix, node):
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)


_VarsLoader.add_multi_constructor("!", _plain)


def _yaml_document(file: Path, text: str, what: str) -> Any:
    """The file's data: JSON first (as Ansible tries), else bounded YAML."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    try:
        _check_yaml_bounds(file, text)
        return yaml.load(text, Loader=_VarsLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else str(file)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(
            f"{what} is not valid YAML ({problem})", where=where, hint=YAML_FIX
        ) from exc


def _check_yaml_bounds(file: Path, text: str) -> None:
    """One streaming pass over the YAML events, stopped as soon as a bound is crossed:
    nesting depth, and the values the document holds once every alias is expanded (a
    "billion laughs" of nine aliases nine deep is 387 million). An alias inside the
    collection it names would make Ansible recurse forever."""
    values = 0
    open_anchors: list[str | None] = []
    starts: list[int] = []  # values counted when each open collection began
    sizes: dict[str, int] = {}  # anchor -> its node's values, once closed
    for event in yaml.parse(text, Loader=SAFE_LOADER):
        line = f"{file}:{event.start_mark.line + 1}" if event.start_mark else str(file)
        if isinstance(event, yaml.CollectionStartEvent):
            if len(starts) >= MAX_YAML_DEPTH:
                raise ConfigError(
                    f"YAML nests deeper than {MAX_YAML_DEPTH} levels",
                    where=line,
                    hint="flatten the data",
                )
            starts.append(values)
            open_anchors.append(event.anchor)
            values += 1
        elif isinstance(event, yaml.CollectionEndEvent):
            anchor = open_anchors.pop()
            size = values - starts.pop()
            if anchor:
                sizes[anchor] = size
        elif isinstance(event, yaml.ScalarEvent):
            values += 1
            if event.anchor:
                sizes[event.anchor] = 1
        elif isinstance(event, yaml.AliasEvent):
            if event.anchor in open_anchors:
                raise ConfigError(
                    f"YAML alias *{event.anchor} refers to itself (inside &{event.anchor})",
                    where=line,
                    hint="write the value out; a recursive value cannot be a variable",
                )
            values += sizes.get(event.anchor, 0)  # an undefined alias fails the load
        if values > MAX_YAML_VALUES:
            raise ConfigError(
                f"YAML holds more than {MAX_YAML_VALUES:,} values once its aliases are "
                "expanded (an alias bomb?)",
                where=line,
                hint="write the data out without nested aliases (*name)",
            )


# ---------------------------------------------------------------- Ansible's view
def _ansible_hosts(path: Path) -> tuple[dict[str, dict[str, Any]], set[str], Any]:
    """Ansible's own inventory parser, so group_vars, INI and plugins behave as in a
    play: the hosts with their variables, the group names and the parsed inventory."""
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.utils.display import Display
    from ansible.vars.manager import VariableManager

    Display().verbosity = -1  # keep Ansible's parser warnings off our stdout
    loader = DataLoader()
    try:
        manager = InventoryManager(loader=loader, sources=[str(path)])
        variables = VariableManager(loader=loader, inventory=manager)
        hosts = {}
        for host in manager.get_hosts():
            hv = variables.get_vars(host=host, include_hostvars=False)
            hosts[str(host.name)] = _variables(path, str(host.name), hv)
    except AnsibleError as exc:  # what the checks above cannot foresee
        raise ConfigError(
            f"Ansible cannot read the inventory: {exc.message}",
            where=str(path),
            hint="fix the inventory; see inventory/sample.yml",
        ) from exc
    return hosts, {str(g) for g in manager.groups}, manager


def _variables(path: Path, host: str, hv: dict[Any, Any]) -> dict[str, Any]:
    """A host's variables without Ansible's play-time ones; a name that is not a string
    (``1: x``) is refused: Ansible only warns, and nothing can refer to it."""
    for k in hv:
        if not isinstance(k, str):
            raise ConfigError(
                f"variable name {k!r} is not a string",
                where=f"{path}: {host}.{k!r}",
                hint="name variables with letters, digits and '_', starting with a letter",
            )
    return {
        k: v
        for k, v in hv.items()
        if not k.startswith(("ansible_play", "groups", "omit", "playbook_dir"))
    }


def select_hosts(inv: Inventory, limit: str | None) -> list[str]:
    """The exact hosts a verb works on: ``--limit`` read once, by Ansible's own rules
    (groups, wildcards, ``a:b``/``a,b`` lists, ``!`` and ``&``). Every verb hands these
    names on as they are, so testinfra never re-reads the pattern its own way."""
    if not limit:
        return list(inv.hosts)
    hosts = inv.patterns.match(limit)
    if not hosts:
        raise BadInput(
            f"--limit {limit!r} matches no host of the inventory",
            where=str(inv.path),
            hint="use a host or group name the inventory defines",
        )
    return hosts


# ---------------------------------------------------------------- host names and ssh
def _check_host_names(path: Path, hosts: dict[str, Any], groups: set[str]) -> None:
    """A host name becomes a directory, a --limit pattern and a testinfra host spec."""
    for name in hosts:
        if not HOST_NAME_RE.fullmatch(name):
            raise ConfigError(
                "not an allowed host name: it becomes a directory, a host pattern and an "
                "ssh argument",
                where=f"{path}: host {name!r}",
                hint=HOST_NAME_FIX,
            )
        if name in groups:
            raise ConfigError(
                "host name is also a group name: a pattern naming the host would select "
                "the whole group",
                where=f"{path}: host {name!r}",
                hint="rename the host or the group",
            )


def _check_connection(path: Path, host: str, hostvars: dict[str, Any]) -> None:
    """What reaches ssh on the controller: checked, since testinfra builds a shell line."""

    def bad(var: str, message: str, hint: str) -> ConfigError:
        return ConfigError(message, where=f"{path}: {host}.{var}", hint=hint)

    connection = str(hostvars.get("ansible_connection", "ssh")).removeprefix("ansible.builtin.")
    if connection not in SSH_CONNECTIONS:
        raise bad(
            "ansible_connection",
            f"ansible_connection {hostvars['ansible_connection']!r} does not reach a node over "
            "SSH: the probes and roles would run on the controller (or elsewhere) and certify it "
            "as this node",
            f"use one of {', '.join(SSH_CONNECTIONS)} (or leave ansible_connection unset)",
        )
    for var in PASSWORD_VARS:
        if hostvars.get(var) not in (None, ""):
            raise bad(
                var, f"{var} is set: gpuboot puts no password on a command line", PASSWORD_FIX
            )
    for var in (v for v in ADDRESS_VARS if v in hostvars):
        if not ADDRESS_RE.fullmatch(str(hostvars[var])):
            raise bad(
                var,
                f"{var} {hostvars[var]!r} is not a host name or IP address (no leading '-', "
                "spaces, quotes, shell characters or templates)",
                "write the node's address literally, e.g. 10.0.0.5 or gpu1.example.internal",
            )
    for var in (v for v in PORT_VARS if v in hostvars):
        if not _is_port(hostvars[var]):
            raise bad(var, f"{var} {hostvars[var]!r} is not a TCP port", "write a number 1-65535")
    for var in (v for v in USER_VARS if v in hostvars):
        if not USER_RE.fullmatch(str(hostvars[var])):
            raise bad(
                var,
                f"{var} {hostvars[var]!r} is not a user name",
                "letters, digits, '.', '-' and '_', starting with a letter, digit or '_'",
            )
    for var in (v for v in SSH_ARG_VARS if v in hostvars):
        problem = _shell_problem(hostvars[var])
        if problem:
            raise bad(
                var,
                f"{var} {hostvars[var]!r} {problem}: certify, scan and plan hand it to ssh "
                "through a shell on the controller (testinfra)",
                "write plain ssh options, e.g. -o StrictHostKeyChecking=yes (quote a value "
                "holding spaces), or move them to ~/.ssh/config",
            )


def _is_port(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, str) and re.fullmatch(r"\d{1,5}", value):
        value = int(value)
    return isinstance(value, int) and 1 <= value <= 65535


def _shell_problem(value: Any) -> str | None:
    """Why a POSIX shell would do more than split this string into words, or None."""
    if not isinstance(value, str):
        return "is not a string"
    quote = None
    for ch in value:
        if (ch < " " and ch != "\t") or ch == "\x7f":
            return "holds a control character (a line break?)"
        if quote == "'":
            quote = None if ch == "'" else quote
        elif quote == '"':
            if ch == '"':
                quote = None
            elif ch in SHELL_ACTIVE_IN_DOUBLE_QUOTES:
                return f"holds {ch!r}, which a shell expands even inside double quotes"
        elif ch in "'\"":
            quote = ch
        elif ch in SHELL_ACTIVE:
            return f"holds {ch!r} outside quotes, which a shell acts on"
    return "has an unbalanced quote" if quote else None


def _check_driver_pins(path: Path, host: str, hostvars: dict[str, Any]) -> None:
    """Driver pins reach package names and the apt preferences template: the same
    checks as a stack's driver (gpuboot/stacks/model.py), one implementation."""
    from gpuboot.stacks.model import _BRANCH_RE, FLAVORS, _Reader
    from gpuboot.stacks.versions import PACKAGE_VERSION_RE, upstream_of

    r = _Reader(str(path))
    key = {v: f"{host}.{v}" for v in (*PIN_VARS, "nvidia_driver_flavor", STREAM_VAR)}
    family = str(hostvars.get("gpuboot_os_family", "debian"))
    example = "3:550.54.15-1.el9" if family == "redhat" else "550.54.15-1"
    branch = hostvars[PIN_VARS[0]]
    if isinstance(branch, int) and not isinstance(branch, bool):
        branch = str(branch)  # an INI inventory's `nvidia_driver_branch=550` is a number
    branch = r.string(branch, key[PIN_VARS[0]], _BRANCH_RE, "550")
    version = r.string(hostvars[PIN_VARS[1]], key[PIN_VARS[1]], PACKAGE_VERSION_RE[family], example)
    if family == "redhat" and "-" not in version:
        # the driver role installs name-[epoch:]version-release: without the release no
        # package matches, on every host
        raise r.error(
            key[PIN_VARS[1]],
            f"EL driver version {version!r} has no release",
            f"write it as dnf names it, e.g. {example!r}",
        )
    if not upstream_of(version).startswith(f"{branch}."):
        raise r.error(
            key[PIN_VARS[1]],
            f"driver {version} is not on branch {branch}",
            f"set nvidia_driver_branch to {upstream_of(version).split('.')[0]!r} or pick a "
            f"{branch}.x driver",
        )
    flavor = hostvars.get("nvidia_driver_flavor")
    if flavor is not None and flavor not in FLAVORS:
        raise r.error(
            key["nvidia_driver_flavor"], f"unknown flavor {flavor!r}", "use open or proprietary"
        )
    stream = hostvars.get(STREAM_VAR)
    if family == "redhat" and stream not in (None, ""):
        # the driver role enables this stream and installs the pins from it: another
        # branch's (or an unknown) stream would fail on every host, one at a time
        want = f"nvidia-driver:{branch}-{'open' if flavor == 'open' else 'dkms'}"
        if stream != want:
            raise r.error(
                key[STREAM_VAR],
                f"module stream {stream!r} is not driver branch {branch}'s "
                f"({flavor or 'proprietary'} flavor)",
                f'set {STREAM_VAR}: "{want}", or "" on EL10 (no modularity: versionlock only)',
            )


def profile_vars(profile: dict[str, Any], hostvars: dict[str, Any]) -> dict[str, Any]:
    """Role variables that follow from the SKU's hardware, unless the inventory sets them."""
    nics = profile.get("hardware", {}).get("nics", [])
    derived = {
        "gpuboot_roce_interfaces": [n["netdev"] for n in nics if n.get("link_layer") == "Ethernet"]
    }
    return {k: v for k, v in derived.items() if k not in hostvars}


def derive_role_vars(
    hostvars: dict[str, Any],
    profile: dict[str, Any] | None,
    mig_layout: dict[str, Any],
    stack: Stack | None,
) -> dict[str, Any]:
    """The role variables gpuboot derives for a host, made in this one place for install
    (the roles), plan and certify/scan (the checks): the profile's hardware facts the
    inventory leaves unset, the checked ``gpuboot_mig`` layout, and the stack's pins (the
    stack wins over the inventory)."""
    derived = profile_vars(profile, hostvars) if profile is not None else {}
    derived.update(mig_layout)
    if stack is not None:
        from gpuboot.stacks import role_vars

        derived.update(role_vars(stack, hostvars.get("gpuboot_os_family", "debian")))
    return derived


def _mig_layout(hostvars: dict[str, Any], profile: dict[str, Any], where: str) -> dict[str, Any]:
    """``{"nvidia_mig_layout": ...}`` for a host with ``gpuboot_mig``, else {}."""
    if hostvars.get("gpuboot_mig") is None:
        return {}
    from gpuboot.mig import layout_vars

    return layout_vars(hostvars["gpuboot_mig"], profile, where)


def with_derived(hostvars: dict[str, Any]) -> dict[str, Any]:
    """A host's variables with what gpuboot derives from them applied (derive_role_vars,
    as load_inventory derives them), for a caller holding only the variables. The
    inventory was checked before, so nothing here fails; applied to variables already
    derived, it changes nothing."""
    from gpuboot.profiles import load_profile
    from gpuboot.stacks import load_stack

    profile = load_profile(hostvars["gpuboot_profile"]) if "gpuboot_profile" in hostvars else None
    layout = _mig_layout(hostvars, profile, "gpuboot_mig") if profile is not None else {}
    stack = load_stack(name) if (name := hostvars.get("gpuboot_stack")) else None
    return {**hostvars, **derive_role_vars(hostvars, profile, layout, stack)}


def _check_os_families(path: Path, hosts: dict[str, dict[str, Any]]) -> None:
    """Refuse, before any host is touched, nodes whose package manager the roles lack:
    on a RHEL/Rocky node every apt task would fail one host at a time instead."""
    other = {h: str(v.get("gpuboot_os_family", "debian")) for h, v in hosts.items()}
    other = {h: fam for h, fam in other.items() if fam not in NODE_OS_FAMILIES}
    if not other:
        return
    host, family = next(iter(other.items()))
    named = ", ".join(f"{h} ({fam})" for h, fam in other.items())
    raise ConfigError(
        f"gpuboot_os_family {family!r} is not supported on nodes ({named}): the roles "
        "install and pin with apt/dpkg or dnf/rpm only",
        where=f"{path}: {host}.gpuboot_os_family",
        hint="set gpuboot_os_family to debian (Debian/Ubuntu, the default) or redhat "
        "(RHEL/Rocky/Alma)",
    )


def _check_hosts(path: Path, hosts: dict[str, dict[str, Any]]) -> dict[str, HostView]:
    """Every host's profile and software choice, checked before any host is touched, and
    its view; every broken compatibility rule of every host is reported at once."""
    from gpuboot.stacks import check_stack

    _check_os_families(path, hosts)
    problems: list[str] = []
    fixes: list[str] = []
    views: dict[str, HostView] = {}
    for host, hostvars in hosts.items():
        profile = _host_profile(path, host, hostvars)
        layout = _mig_layout(hostvars, profile, f"{path}: {host}.gpuboot_mig")
        stack = _host_stack(path, host, hostvars)
        if stack is not None:
            for v in check_stack(stack, profile, where=f"{path}: {host}.gpuboot_stack"):
                problems.append(f"{v.rule_id} {v.where}: {v.message}")
                fixes.append(v.fix)
        role_vars = derive_role_vars(hostvars, profile, layout, stack)
        views[host] = HostView(host, hostvars, profile, stack, role_vars)
    if problems:
        raise ConfigError(
            f"{len(problems)} compatibility rule(s) broken: " + "; ".join(problems),
            where=str(path),
            hint="; ".join(dict.fromkeys(fixes)),
        )
    return views


def _host_profile(path: Path, host: str, hostvars: dict[str, Any]) -> dict[str, Any]:
    from gpuboot.profiles import load_profile

    if "gpuboot_profile" not in hostvars:
        raise ConfigError(
            f"host {host} has no gpuboot_profile",
            where=f"{path}: {host}.gpuboot_profile",
            hint=PROFILE_FIX,
        )
    try:
        return load_profile(hostvars["gpuboot_profile"])
    except ConfigError as exc:
        raise ConfigError(
            exc.message, where=f"{path}: {host}.gpuboot_profile", hint=exc.hint
        ) from exc


def _host_stack(path: Path, host: str, hostvars: dict[str, Any]) -> Stack | None:
    """The host's stack, or None where it pins the driver alone (those pins checked)."""
    from gpuboot.stacks import load_stack

    stack_name = hostvars.get("gpuboot_stack")
    if stack_name is None:
        missing = [v for v in PIN_VARS if v not in hostvars]
        if missing:
            raise ConfigError(
                f"host {host} names neither gpuboot_stack nor {missing[0]}",
                where=f"{path}: {host}.{missing[0]}",
                hint=PIN_FIX,
            )
        _check_driver_pins(path, host, hostvars)
        return None
    clash = [v for v in PIN_VARS if v in hostvars]
    if clash:
        raise ConfigError(
            f"host {host} sets both gpuboot_stack and {clash[0]}",
            where=f"{path}: {host}.{clash[0]}",
            hint="the stack pins the driver: remove the separate pin",
        )
    try:
        return load_stack(stack_name)
    except ConfigError as exc:
        raise ConfigError(
            exc.message, where=f"{path}: {host}.gpuboot_stack", hint=exc.hint
        ) from exc
