"""GPU health for the compliance suite: an NVML adapter (probe) and the pure checks on what it read."""
