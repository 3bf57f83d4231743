"""The HTML report renders in headless Chromium, charts included; the screenshot is kept.

Artifacts: artifacts/report-render.png (full page at 1280 px), its chart crop, and the
report.html that produced them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuboot.report import certificate, write_reports
from gpuboot.results import RunReport
from tests.unit.report import sample  # the unit tests' sample reports

from . import png

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")
NOW = datetime(2026, 11, 22, 10, 20, tzinfo=UTC)
HOSTS = ["gpu-a01", "gpu-a02", "gpu-a03", "gpu-b07.rack2.example.net", "gpu-c11"]


def _chromium() -> str:
    for name in CHROMIUM:
        if found := shutil.which(name):
            return found
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail("chromium is missing on CI: install it (apt-get install -y chromium)")
    pytest.skip("chromium is not installed (apt-get install -y chromium) — HTML render not checked")


def _screenshot(browser: str, page: Path, out: Path, profile: Path, height: int) -> None:
    cmd = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        f"--window-size=1280,{height}",
        f"--screenshot={out}",
        page.resolve().as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and out.is_file(), (
        f"chromium failed (rc {proc.returncode}): {proc.stderr[-2000:]}"
    )


def _row_colours(img: png.Image, y: int) -> set[tuple[int, ...]]:
    return {img.pixel(x, y)[:3] for x in range(0, img.width, 2)}


def _has_colour(img: png.Image, rgb: tuple[int, int, int]) -> bool:
    """An exact pixel of this colour somewhere (solid SVG fills are not anti-aliased)."""
    needle, c = bytes(rgb), img.channels
    for line in img.rows:
        at = line.find(needle)
        while at != -1:
            if at % c == 0:
                return True
            at = line.find(needle, at + 1)
    return False


def test_report_renders_in_headless_chromium(tmp_path: Path):
    browser = _chromium()
    bundle = sample.make_bundle(tmp_path / "bundles", HOSTS)
    key = certificate.generate_key(tmp_path / "key.pem")
    paths = write_reports(
        RunReport.from_dict(sample.sample_report(bundle)), tmp_path / "out", key_path=key, now=NOW
    )

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report-render.png"
    shot.unlink(missing_ok=True)
    _screenshot(browser, paths["html"], shot, tmp_path / "profile", 3200)
    shutil.copyfile(paths["html"], ARTIFACTS / "report-render.html")

    assert shot.stat().st_size > 50_000  # a blank or error page compresses to a few KB
    img = png.read(shot)
    assert (img.width, img.height) == (1280, 3200)
    colours = set()
    for y in range(0, img.height, 7):
        colours |= _row_colours(img, y)
    assert len(colours) > 200, "screenshot is (nearly) uniform: nothing rendered"
    # The charts drew: bar colours of PASS and FAIL, and the fail band, are on the page.
    assert _has_colour(img, (0x2D, 0xA4, 0x4E)), "no PASS bar rendered"
    assert _has_colour(img, (0xCF, 0x22, 0x2E)), "no FAIL bar rendered"
    assert _has_colour(img, (0xFF, 0xE1, 0xDE)), "no fail band rendered"
    # Keep the charts region on its own for a quick look in CI artifacts.
    lower = png.crop(img, img.height // 2, img.height)
    png.write(ARTIFACTS / "report-render-charts.png", lower)
    assert png.read(ARTIFACTS / "report-render-charts.png").height == img.height - img.height // 2
