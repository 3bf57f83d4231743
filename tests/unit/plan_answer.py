"""What a node sends back for `gpuboot plan`'s read (gpuboot.plan.with_runfile_read), for
tests whose fake nodes answer without a shell: each part with its "<exit> <bytes>" trailer."""

from __future__ import annotations


def answer(packages: str, runfile: str = "", rc: int = 0) -> str:
    return (
        f"{packages}\n--gpuboot-end packages {rc} {len(packages.encode())}\n"
        f"{runfile}\n--gpuboot-end runfile 0 {len(runfile.encode())}\n"
    )
