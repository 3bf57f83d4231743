"""Shared test fixtures. Lab fixtures live in tests/integration/conftest.py."""

import os
import tempfile

# Kept run directories of tests go to a throw-away place, not the operator's home.
os.environ.setdefault("GPUBOOT_RUNS", tempfile.mkdtemp(prefix="gpuboot-test-runs-"))
