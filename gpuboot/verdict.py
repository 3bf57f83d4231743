"""The verdict vocabulary, once: a rule's status and a node's verdict.

A ``StrEnum``: each member is its own string ("PASS"), so the JSON documents, reports and
the scan history hold exactly the words they always held, and a status read back from
any of them compares equal to its member.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    ERROR = "ERROR"
    SKIPPED = "SKIPPED"  # a rule that did not run: never a node verdict, never counted as passed


# A node's verdict and a measurement's status: every Status but SKIPPED.
VERDICTS = (Status.PASS, Status.WARN, Status.FAIL, Status.ERROR)
# What takes a node out of service and makes a run fail: not WARN (a WARN node passes
# certify only with --allow-warn).
BAD = (Status.FAIL, Status.ERROR)
# What a node that passed its checks is shown as when its certificate is partial with a gap
# its gpuboot_accept_partial does not accept: not certified, so never PASS. A word of the
# certification (gpuboot.report.extent), never a rule's status.
PARTIAL = "PARTIAL"
# The verdict of a node whose executor was lost before its answer arrived: neither judged
# nor bad, never certified, never taken out. A word of the run, never a rule's status.
UNKNOWN = "UNKNOWN"
