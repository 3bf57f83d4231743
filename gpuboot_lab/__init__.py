"""The gpuboot lab: a simulated GPU fleet of podman nodes, its package repository and the
GPU/NIC emulator it bind-mounts into them (``emulator/``, data: a stdlib-only program).

gpuboot_lab imports the product (gpuboot); the product never imports the lab (checked by
scripts/check_imports.py in `make lint`). The CLI finds the lab's verbs by entry point.
"""
