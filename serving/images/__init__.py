"""Container images of the serving layer (gateway, drift agent), built with podman from Debian packages."""
