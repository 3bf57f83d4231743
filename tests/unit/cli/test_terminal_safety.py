"""Nothing a node or a bundle says can drive the operator's terminal: control characters
in a probe's stderr or a host directory's name are printed as escapes."""

from __future__ import annotations

import json

from gpuboot import cli
from gpuboot.ui import printable, table

OSC_TITLE = "\x1b]0;pwned\x07"  # sets the terminal's title; others rewrite the screen


def _hostile_bundle(tmp_path):
    host = tmp_path / "bundle" / "n\x1b[2J1"
    host.mkdir(parents=True)
    (host / "dmesg.txt").write_text("")
    meta = {
        "profile": "hgx-h100-sxm-8gpu",
        "outputs": {"dmesg.txt": {"rc": 1, "stderr": f"{OSC_TITLE}dmesg: read kernel buffer"}},
    }
    (host / "meta.json").write_text(json.dumps(meta))
    return host.parent


def test_evaluate_text_escapes_a_nodes_control_characters(tmp_path, capsys):
    code = cli.main(["evaluate", "--bundle", str(_hostile_bundle(tmp_path)), "--ignore-manifest"])
    out = capsys.readouterr().out
    assert code == 1
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b]0;pwned\\x07" in out  # still shown, as text
    assert "n\\x1b[2J1" in out


def test_json_keeps_the_exact_strings(tmp_path, capsys):
    bundle = _hostile_bundle(tmp_path)
    cli.main(["evaluate", "--bundle", str(bundle), "--ignore-manifest", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["nodes"][0]["host"] == "n\x1b[2J1"


def test_a_table_cell_stays_on_its_line():
    text = table(("node", "reason"), [("a\nb", "x\ry")])
    assert len(text.splitlines()) == 3 and "a\\nb" in text and "x\\ry" in text
    assert printable("line 1\nline 2\ttab") == "line 1\nline 2\ttab"
