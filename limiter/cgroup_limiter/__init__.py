"""cgroup v2 IO/CPU limiter: a node agent that keeps noisy pods off Triton's disk and CPU."""
