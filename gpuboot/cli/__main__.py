"""`python -m gpuboot.cli`: the console script without an install."""

from gpuboot.cli.boundary import entry

entry()
