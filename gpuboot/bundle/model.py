"""What a bundle holds for a host, the caps on it, and the error when it cannot be trusted."""

from __future__ import annotations

from dataclasses import dataclass

from gpuboot.errors import GpubootError

# What a node may send back, and what evaluate reads from a bundle: a node (and a bundle
# that left the controller) is less trusted than the controller, so its answer is data
# within limits, never a path to write or a file to follow.
MAX_FILE_BYTES = 64 * 1024 * 1024  # one probe file
MAX_NODE_BYTES = 256 * 1024 * 1024  # all of a node's files together
MAX_STDERR_KEPT = 64 * 1024  # a probe's stderr is read for its first line only
MAX_META_BYTES = 16 * 1024 * 1024  # meta.json (per-file rc/stderr included)
MAX_PROFILE_BYTES = 1024 * 1024  # a host's own SKU profile
# Files in one host directory: a certify run keeps about 60; reading a million empty ones
# would hold evaluate for minutes per host, and their names alone cost memory.
MAX_HOST_FILES = 4096


class BundleError(GpubootError):
    """A host's evidence cannot be kept or read back safely (an unsafe name; links, special
    files, oversize, malformed meta.json in a bundle): that host is ERROR, the others are
    judged."""


@dataclass(frozen=True)
class ProbeOutput:
    stdout: str
    stderr: str
    rc: int
    # Why the output is known not to be whole ("" when it is, or when nothing can tell: a
    # hand-collected capture). A listing cut at a line boundary parses cleanly and reads as
    # "module/package/device missing", so gpuboot's own collection records where each output
    # ended (collect.py's trailer, meta.json's "bytes") and a mismatch is set here: the rules
    # reading the file are ERROR (checks/base.py), never FAIL.
    incomplete: str = ""


Evidence = dict[str, ProbeOutput]  # probe file name -> what its command printed
