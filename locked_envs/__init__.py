"""The repository's locked environments: one hashed lock per virtual environment (and the npm
tree of the Argo Rollouts schemas), each built once into a cache outside the clone, keyed by
its lock, and linked into the clone. Standard library only: it runs before any venv exists.
"""
