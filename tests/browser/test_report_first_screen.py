"""At 300 nodes the HTML report's first screen shows every failure: in headless Chromium at
1280x800, every failing node's name and every failed rule are laid out inside the first
viewport. Artifacts: artifacts/report-first-screen.png and the
report.html it shows."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html import unescape
from pathlib import Path

import pytest

from gpuboot.report import write_reports
from gpuboot.results import RunReport
from tests.unit.report import fleet  # the unit tests' 300-node fleet

from . import png
from .test_html_render import ARTIFACTS, NOW, _chromium, _screenshot

pytestmark = pytest.mark.browser

WIDTH, HEIGHT = 1280, 800
# Appended to a copy of the report only (the report itself carries no script): every
# word laid out inside the first viewport, as the browser placed it.
PROBE = """<script>
const H = window.innerHeight, W = window.innerWidth, seen = new Set();
const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
while (walk.nextNode()) {
  const node = walk.currentNode, re = /[^\\s,]+/g;
  let m;
  while ((m = re.exec(node.data))) {
    const r = document.createRange();
    r.setStart(node, m.index); r.setEnd(node, m.index + m[0].length);
    for (const b of r.getClientRects())
      if (b.width > 0 && b.top >= 0 && b.bottom <= H && b.right <= W) seen.add(m[0]);
  }
}
const out = document.createElement("pre");
out.id = "first-screen";
out.textContent = JSON.stringify({H: H, W: W, words: [...seen]});
document.body.appendChild(out);
</script>"""


def _first_screen(browser: str, page: Path, profile: Path) -> dict:
    probe = page.with_name("first-screen-probe.html")
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    cmd = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        f"--user-data-dir={profile}",
        f"--window-size={WIDTH},{HEIGHT}",
        "--dump-dom",
        probe.resolve().as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="first-screen">(.*?)</pre>', proc.stdout, flags=re.S)
    assert proc.returncode == 0 and found, (
        f"chromium failed (rc {proc.returncode}): " + (proc.stderr[-2000:])
    )
    return json.loads(unescape(found.group(1)))


def test_first_screen_of_a_300_node_report_shows_every_failure(tmp_path: Path):
    browser = _chromium()
    report = fleet.fleet_report()
    paths = write_reports(RunReport.from_dict(report), tmp_path / "out", key_path=None, now=NOW)

    seen = _first_screen(browser, paths["html"], tmp_path / "profile")
    # --dump-dom lays the page out in the window less its frame: a shorter viewport than
    # the screenshot's, so the check is the stricter one
    assert seen["W"] == WIDTH and 600 <= seen["H"] <= HEIGHT, seen["H"]
    words = set(seen["words"])
    failing = [n for n in report["nodes"] if n["verdict"] != "PASS"]
    assert len(failing) == len(fleet.FAILING) + len(fleet.WARNED)
    for node in failing:
        assert node["host"] in words, f"{node['host']} is not on the first screen"
        for f in node["findings"]:
            if f["status"] != "PASS":
                assert f["rule"] in words, f"{f['rule']} of {node['host']} is not on it"
    assert "node1" not in words  # a passing node is not what the first screen shows

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report-first-screen.png"
    shot.unlink(missing_ok=True)
    _screenshot(browser, paths["html"], shot, tmp_path / "profile-shot", HEIGHT)
    shutil.copyfile(paths["html"], ARTIFACTS / "report-first-screen.html")
    img = png.read(shot)
    assert (img.width, img.height) == (WIDTH, HEIGHT)
    colours = {img.pixel(x, y)[:3] for y in range(0, HEIGHT, 9) for x in range(0, WIDTH, 3)}
    assert len(colours) > 50, "the first screen is (nearly) uniform: nothing rendered"
