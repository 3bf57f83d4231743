"""The command line's own vocabulary, read from its argparse tree: `gpuboot help`,
"did you mean" for a mistyped verb, choice or option, and shell completion
(`gpuboot completion bash|zsh`). Everything is derived from the parser that parses, so
a new verb or option is completed and suggested without touching this file.
"""

from __future__ import annotations

import argparse
import difflib
import re
import shlex
from dataclasses import dataclass, field

from gpuboot.errors import BadInput

_INVALID_CHOICE = re.compile(r"invalid choice: '?(?P<value>[^']*?)'? \(choose from")


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def chosen(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost (sub)parser a parsed namespace went through."""
    while (sub := _subparsers(parser)) is not None:
        name = getattr(ns, sub.dest, None) if sub.dest != argparse.SUPPRESS else None
        if name not in sub.choices:
            break
        parser = sub.choices[name]
    return parser


def close(word: str, candidates) -> list[str]:
    return difflib.get_close_matches(word, sorted(set(candidates)), n=1, cutoff=0.6)


def did_you_mean(parser: argparse.ArgumentParser, message: str, argv: list[str]) -> str | None:
    """'did you mean ...?' for an argparse error of ``parser``, or None."""
    m = _INVALID_CHOICE.search(message)
    if m:
        for action in parser._actions:
            if action.choices and (found := close(m["value"], action.choices)):
                return "did you mean " + " or ".join(f"'{f}'" for f in found) + "?"
        return None
    known = parser._option_string_actions
    options = [o for o in known if o.startswith("--")]
    for token in argv:
        flag = token.split("=", 1)[0]
        if flag.startswith("--") and flag not in known and (found := close(flag, options)):
            return f"{flag}: did you mean " + " or ".join(f"'{f}'" for f in found) + "?"
    return None


def help_text(parser: argparse.ArgumentParser, words: list[str]) -> str:
    """`gpuboot help [verb [subverb]]`: that parser's --help text."""
    for word in words:
        sub = _subparsers(parser)
        if sub is None or word not in sub.choices:
            names = list(sub.choices) if sub else []
            found = close(word, names)
            raise BadInput(
                f"no such command: {parser.prog} {word}",
                where="gpuboot help",
                hint=(f"did you mean '{found[0]}'? " if found else "")
                + f"`{parser.prog} --help` lists the commands",
            )
        parser = sub.choices[word]
    return parser.format_help().rstrip("\n")


# ---------------------------------------------------------------- shell completion
@dataclass
class _Node:
    path: str  # "" for gpuboot itself, "runs prune" for a nested command
    commands: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)
    words: list[str] = field(default_factory=list)  # choices of positionals
    values: dict[str, list[str] | None] = field(default_factory=dict)  # option -> choices


def _walk(parser: argparse.ArgumentParser, path: str = "") -> list[_Node]:
    node = _Node(path)
    nodes = [node]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                node.commands.append(name)
                nodes.extend(_walk(sub, f"{path} {name}".strip()))
        elif action.option_strings:
            node.options.extend(action.option_strings)
            if action.nargs != 0:
                choices = [str(c) for c in action.choices] if action.choices else None
                for opt in action.option_strings:
                    node.values[opt] = choices
        elif action.choices:
            node.words.extend(str(c) for c in action.choices)
    return nodes


def _words(items) -> str:
    return shlex.quote(" ".join(items))


def bash(parser: argparse.ArgumentParser) -> str:
    nodes = _walk(parser)
    descend, per_path, values = [], [], []
    for node in nodes:
        for cmd in node.commands:
            descend.append(shlex.quote(f"{node.path}/{cmd}"))
        per_path.append(
            f"        {shlex.quote(node.path)})"
            f" words={_words(node.commands + node.words)}; opts={_words(node.options)} ;;"
        )
        for opt, choices in node.values.items():
            key = shlex.quote(f"{node.path}|{opt}")
            reply = f"-W {_words(choices)}" if choices else "-f"
            values.append(f'        {key}) COMPREPLY=( $(compgen {reply} -- "$cur") ); return 0 ;;')
    return "\n".join(
        [
            f"# {parser.prog} completion for bash, generated from its argument parser;",
            f"# load it with: source <({parser.prog} completion bash)",
            "_gpuboot() {",
            "    local cur prev path w i words opts",
            "    COMPREPLY=()",
            '    cur="${COMP_WORDS[COMP_CWORD]}"',
            '    prev=""',
            '    (( COMP_CWORD > 0 )) && prev="${COMP_WORDS[COMP_CWORD-1]}"',
            '    path=""',
            "    for (( i=1; i<COMP_CWORD; i++ )); do",
            '        w="${COMP_WORDS[i]}"',
            '        case "$path/$w" in',
            f'            {"|".join(descend) or "__none__"}) path="${{path:+$path }}$w" ;;',
            "        esac",
            "    done",
            '    case "$path|$prev" in',
            *values,
            "    esac",
            '    words=""; opts=""',
            '    case "$path" in',
            *per_path,
            "    esac",
            '    if [[ "$cur" == -* ]]; then',
            '        COMPREPLY=( $(compgen -W "$opts" -- "$cur") )',
            '    elif [[ -n "$words" ]]; then',
            '        COMPREPLY=( $(compgen -W "$words" -- "$cur") )',
            "    else",
            '        COMPREPLY=( $(compgen -f -- "$cur") )',
            "    fi",
            "    return 0",
            "}",
            f"complete -F _gpuboot {parser.prog}",
            "",
        ]
    )


def zsh(parser: argparse.ArgumentParser) -> str:
    """The bash function through zsh's bashcompinit: one generated source of truth."""
    return "\n".join(
        [
            f"# {parser.prog} completion for zsh; load it with:",
            f"# source <({parser.prog} completion zsh)",
            "(( $+functions[compdef] )) || { autoload -U +X compinit && compinit }",
            "autoload -U +X bashcompinit && bashcompinit",
            bash(parser),
        ]
    )


SHELLS = {"bash": bash, "zsh": zsh}
