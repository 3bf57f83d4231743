"""`evaluate --bundle` given a run directory judges that run's bundle/, never its
reports/ or bundle/ as hosts."""

from __future__ import annotations

import json
import shutil

import pytest

from gpuboot.cli import main
from tests.paths import REPO

BUNDLE = REPO / "tests" / "fixtures" / "bundles" / "real-h100-healthy"


def _hosts(capsys, path) -> list[str]:
    main(["evaluate", "--bundle", str(path), "--ignore-manifest", "--json", "-q"])
    return sorted(n["host"] for n in json.loads(capsys.readouterr().out)["nodes"])


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / "runs" / "certify-20261127-1"
    shutil.copytree(BUNDLE, run / "bundle")
    (run / "reports").mkdir()
    (run / "reports" / "report.html").write_text("<html></html>")
    (run / "report.json").write_text("{}")
    return run


def test_a_run_directory_is_judged_by_its_bundle(run_dir, capsys):
    expected = _hosts(capsys, BUNDLE)
    assert "bundle" not in expected and expected
    assert _hosts(capsys, run_dir) == expected


def test_a_run_directory_says_which_bundle_it_judged(run_dir, capsys):
    main(["evaluate", "--bundle", str(run_dir), "--ignore-manifest"])
    assert f"judging its evidence bundle {run_dir / 'bundle'}" in capsys.readouterr().err


def test_a_run_directory_without_its_bundle_is_bad_input(run_dir, capsys):
    shutil.rmtree(run_dir / "bundle")
    assert main(["evaluate", "--bundle", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "run directory without an evidence bundle" in err and str(run_dir) in err


def test_a_bundle_with_a_host_named_reports_is_still_a_bundle(tmp_path, capsys):
    bundle = tmp_path / "b"
    shutil.copytree(BUNDLE, bundle)
    first = sorted(p for p in bundle.iterdir() if p.is_dir())[0]
    first.rename(bundle / "reports")
    assert "reports" in _hosts(capsys, bundle)
