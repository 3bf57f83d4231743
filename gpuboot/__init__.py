"""gpuboot: bootstrap, pin and certify GPU servers before they join Kubernetes."""

__version__ = "0.1.0"
