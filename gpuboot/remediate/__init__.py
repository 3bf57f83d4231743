"""Remediation with a bounded ladder: reconcile, reset or reboot, reinstall, quarantine.
gpuboot.remediate.ladder decides (pure), gpuboot.remediate.run acts (run_ladder), hold
says who holds a node and releases gpuboot's hold."""
