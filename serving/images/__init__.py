"""Container images of the serving layer (gateway, drift agent) and of the cgroup limiter node agent, built with
podman from Debian packages."""
