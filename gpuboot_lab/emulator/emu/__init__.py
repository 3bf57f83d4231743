"""gpuemu: the lab's hardware emulator (stdlib only; runs inside lab nodes as /opt/gpuemu)."""
