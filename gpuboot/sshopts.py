"""ssh, scp and sftp arguments read as those tools read them, to find what would run a
program on the controller: an option that is a command (ProxyCommand, LocalCommand, ...),
one that loads code (PKCS11Provider, SecurityKeyProvider), a config file (-F, which may
hold any of them) or a program to run instead of ssh (scp/sftp -S, sftp -D).

Words are split as Ansible splits them (shlex, no shell); an option's keyword is read as
ssh's readconf reads it: case-insensitive, ended by '=' or a blank, maybe quoted."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

# A Unix socket's path holds 107 bytes (sun_path: 108 with its NUL), and ssh binds a
# master's socket first under its ControlPath and 17 characters more (".", 16 random)
# before renaming it: a longer ControlPath gets no master, and its host is unreachable.
SSH_CONTROL_PATH_MAX = 107 - 17

# keyword (lower case) -> how gpuboot_allow_ssh_options names it
COMMAND_KEYWORDS = {
    name.lower(): name
    for name in (
        "ProxyCommand",
        "ProxyUseFdpass",
        "LocalCommand",
        "PermitLocalCommand",
        "KnownHostsCommand",
        "Match",  # `Match exec` runs a command
        "Host",  # a block that could hold any of these
        "Include",  # a file that could
        "PKCS11Provider",  # a library ssh loads
        "SecurityKeyProvider",  # likewise
        "XAuthLocation",  # the program ssh runs for X11 forwarding
    )
} | {"smartcarddevice": "PKCS11Provider"}  # ssh's old name for it

# Options that run nothing but let the node reach into the controller or write where gpuboot
# never asked: keyword (lower case) -> allow-list name. Refused like the commands. Reading a
# file the operator names (IdentityFile, UserKnownHostsFile, ControlPath: ssh parses it, the
# node learns nothing of it) is left alone: see EFFECTS for what is refused and why.
REACH_KEYWORDS = {
    "remoteforward": "RemoteForward",
    "localforward": "LocalForward",
    "dynamicforward": "DynamicForward",
    "forwardagent": "ForwardAgent",
    "forwardx11": "ForwardX11",
    "forwardx11trusted": "ForwardX11",
    "tunnel": "Tunnel",
    "sendenv": "SendEnv",
}
# A value that turns one of these off: harmless, accepted.
OFF = frozenset({"no", "false"})
EFFECTS = {
    "-E": "would write ssh's log, with what the node sends, to a file on the controller",
    "RemoteForward": "would open the controller's ports or sockets (a container engine's "
    "socket is root on it) to the node",
    "LocalForward": "would listen on the controller (a socket path creates, or replaces, "
    "a file there)",
    "DynamicForward": "would listen on the controller as a SOCKS proxy into the node's networks",
    "ForwardAgent": "would let the node use the controller's ssh agent (the operator's keys)",
    "ForwardX11": "would let the node reach the controller's X display",
    "Tunnel": "would join the controller and the node by a tun device",
    "SendEnv": "would send the controller's environment (its credentials) to the node",
}


def effect(name: str) -> str:
    """What the refused setting ``name`` would do on the controller, for its refusal."""
    return EFFECTS.get(name, "would run a program on the controller")


@dataclass(frozen=True)
class Tool:
    name: str
    flags_with_value: str  # getopt letters that take an argument
    refused_flags: dict[str, str]  # letter -> allow-list name
    refused_switches: dict[str, str] = field(default_factory=dict)  # the same, no argument


SSH = Tool(
    "ssh",
    "BbcDEeFIiJLlmOoPpQRSWw",
    {
        "F": "-F",
        "I": "PKCS11Provider",
        "E": "-E",
        "R": "RemoteForward",
        "L": "LocalForward",
        "D": "DynamicForward",
        "w": "Tunnel",
    },
    {"A": "ForwardAgent", "X": "ForwardX11", "Y": "ForwardX11"},
)
SCP = Tool("scp", "cDFiJloPSX", {"F": "-F", "S": "-S", "D": "-D"})
SFTP = Tool("sftp", "BbcDFiJloPRSsX", {"F": "-F", "S": "-S", "D": "-D"})
# Everything gpuboot_allow_ssh_options may name.
ALLOWABLE = frozenset(
    [*COMMAND_KEYWORDS.values(), *REACH_KEYWORDS.values(), "-F", "-S", "-D", "-E", "ssh_executable"]
)


class NotOptions(ValueError):
    """The string cannot be read as words (an unbalanced quote) or an option lacks its
    value."""


@dataclass(frozen=True)
class Options:
    words: tuple[str, ...]  # the arguments, as the tool receives them
    keywords: frozenset[str]  # every -o keyword, lower case
    refused: tuple[str, ...]  # allow-list names of what would run a program or reach in
    strays: tuple[str, ...]  # words that are no option: ssh would take one as its host


def read(text: str, tool: Tool = SSH) -> Options:
    """The options in ``text`` (every word read as one: ssh reads options after its
    host too); NotOptions when it cannot be read."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise NotOptions(str(exc)) from exc
    keywords: list[str] = []
    runs: list[str] = []
    strays: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("-") or word in ("-", "--"):
            strays.append(word)
            i += 1
            continue
        for at, letter in enumerate(word[1:], start=1):
            if letter in tool.refused_switches:
                runs.append(tool.refused_switches[letter])
            if letter not in tool.flags_with_value:
                continue
            value = word[at + 1 :]
            if not value:
                i += 1
                if i == len(words):
                    raise NotOptions(f"{word!r} lacks its value")
                value = words[i]
            if letter in tool.refused_flags:
                runs.append(tool.refused_flags[letter])
            if letter == "J":
                check_jump(value)
            if letter == "o":
                keyword = option_keyword(value)
                keywords.append(keyword)
                if keyword == "proxyjump":
                    check_jump(option_value(value))
                if keyword in COMMAND_KEYWORDS:
                    runs.append(COMMAND_KEYWORDS[keyword])
                elif keyword in REACH_KEYWORDS and option_value(value).lower() not in OFF:
                    runs.append(REACH_KEYWORDS[keyword])
            break  # the rest of the word was this letter's value
        i += 1
    return Options(tuple(words), frozenset(keywords), tuple(dict.fromkeys(runs)), tuple(strays))


def option_keyword(value: str) -> str:
    """The keyword of one ``-o`` value, lower case, as ssh's readconf finds it: after
    blanks and an '=', up to a blank or '='; a quote inside it joins what it encloses.
    Read generously (quotes dropped, every leading '=' skipped): a spelling ssh would
    reject may be refused too, one it accepts is never missed."""
    text = value.replace('"', "").lstrip(" \t\r\n=")
    return re.split(r"[ \t\r\n=]", text, maxsplit=1)[0].lower()


def option_value(value: str) -> str:
    """What follows the keyword of one ``-o`` value (quotes dropped), as option_keyword
    reads it."""
    text = value.replace('"', "").lstrip(" \t\r\n=")
    parts = re.split(r"[ \t\r\n=]+", text, maxsplit=1)
    return parts[1].strip() if len(parts) > 1 else ""


# One jump of a ProxyJump list: [ssh://][user@]host[:port], host a name or [IPv6 address].
_JUMP = re.compile(
    r"(?:ssh://)?(?:[A-Za-z0-9_][A-Za-z0-9._-]*@)?"
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?"
)


def check_jump(value: str) -> None:
    """NotOptions unless ``value`` is "none" or jump hosts as ssh documents them. ssh (9.2)
    pastes each jump's user and host unquoted into a command its shell runs, so a `$(...)`
    in one runs on the controller: only plain names pass."""
    if value.lower() == "none":
        return
    bad = [j for j in value.split(",") if not _JUMP.fullmatch(j)]
    if bad:
        raise NotOptions(
            f"ProxyJump {bad[0]!r} is not [user@]host[:port] (ssh hands a jump host to a "
            "shell: only letters, digits, '.', '_' and '-' in its names)"
        )
