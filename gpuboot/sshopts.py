"""ssh, scp and sftp arguments read as those tools read them, to find what would run a
program on the controller: an option that is a command (ProxyCommand, LocalCommand, ...),
one that loads code (PKCS11Provider, SecurityKeyProvider), a config file (-F, which may
hold any of them) or a program to run instead of ssh (scp/sftp -S, sftp -D).

Words are split as Ansible splits them (shlex, no shell); an option's keyword is read as
ssh's readconf reads it: case-insensitive, ended by '=' or a blank, maybe quoted."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Tool:
    name: str
    flags_with_value: str  # getopt letters that take an argument
    refused_flags: dict[str, str]  # letter -> allow-list name


SSH = Tool("ssh", "BbcDEeFIiJLlmOoPpQRSWw", {"F": "-F", "I": "PKCS11Provider"})
SCP = Tool("scp", "cDFiJloPSX", {"F": "-F", "S": "-S", "D": "-D"})
SFTP = Tool("sftp", "BbcDFiJloPRSsX", {"F": "-F", "S": "-S", "D": "-D"})
# Everything gpuboot_allow_ssh_options may name.
ALLOWABLE = frozenset([*COMMAND_KEYWORDS.values(), "-F", "-S", "-D", "ssh_executable"])


class NotOptions(ValueError):
    """The string cannot be read as words (an unbalanced quote) or an option lacks its
    value."""


@dataclass(frozen=True)
class Options:
    words: tuple[str, ...]  # the arguments, as the tool receives them
    keywords: frozenset[str]  # every -o keyword, lower case
    runs_commands: tuple[str, ...]  # allow-list names of what would run a program
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
            if letter == "o":
                keyword = option_keyword(value)
                keywords.append(keyword)
                if keyword in COMMAND_KEYWORDS:
                    runs.append(COMMAND_KEYWORDS[keyword])
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
