"""The embedded lab: Debian 12 qemu VMs that stand in for GPU nodes (see scripts/lab)."""
