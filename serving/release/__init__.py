"""Model releases: a validated model repository published under its content hash (README.md)."""
