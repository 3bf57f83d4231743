"""The gpuboot lab: a simulated GPU fleet of podman nodes, its package repository and the
GPU/NIC emulator it bind-mounts into them (``emulator/``, data: a stdlib-only program).

It ships as its own distribution, gpuboot-lab (lab/pyproject.toml), never in the product's
wheel. gpuboot_lab imports the product (gpuboot); the product never imports the lab (checked
by scripts/check_imports.py in `make lint`). The CLI finds the lab's verbs by the entry
point gpuboot-lab declares.
"""
