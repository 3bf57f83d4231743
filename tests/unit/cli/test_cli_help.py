"""`gpuboot help [verb]` and "did you mean" for a mistyped verb, choice or option: exit 2,
one line naming the likely word, never a traceback."""

from __future__ import annotations

import json

import pytest

from gpuboot import cli


def test_help_prints_the_top_level_and_a_verbs_help(capsys):
    assert cli.main(["help"]) == 0
    top = capsys.readouterr().out
    assert "usage: gpuboot" in top and "certify" in top and "runs" in top
    assert cli.main(["help", "install"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: gpuboot install") and "--serial" in out
    assert cli.main(["help", "runs", "prune"]) == 0
    assert "--older-than" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "suggested"),
    [
        (["certfy", "-i", "x.yml"], "'certify'"),
        (["instal"], "'install'"),
        (["help", "mirorr"], "'mirror'"),
        (["matrix", "chek", "lts-550-cuda12.4"], "'check'"),
        (["mirror", "--stack", "lts-550-cuda12.4", "--os-famly", "debian"], "'--os-family'"),
        (["certify", "--gen-key", "k.pem", "--probs", "quick"], "'--probes'"),
        (["runs", "prune", "--keep", "2", "--dryrun"], "'--dry-run'"),
    ],
)
def test_a_mistyped_word_is_exit_2_with_a_suggestion(argv, suggested, capsys):
    assert cli.main([*argv, "--json"]) == 2
    captured = capsys.readouterr()
    error = json.loads(captured.out)["error"]
    assert f"did you mean {suggested}" in error["hint"], error
    assert "Traceback" not in captured.err
    assert f"did you mean {suggested}" in captured.err  # the operator sees it too


def test_no_suggestion_for_a_word_like_none(capsys):
    assert cli.main(["zzzzqqq"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice" in err and "did you mean" not in err
