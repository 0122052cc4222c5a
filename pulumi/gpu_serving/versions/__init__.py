"""docs/versions.md: each environment's versions (driver, Triton, charts, images), read from the
platform matrix, the stack files and the fleets' inventories, beside what the labs here prove of
each. `labs.py` says what the labs run, `environments.py` collects an environment's rows,
`page.py` writes the page; `python -m gpu_serving.versions --out docs/versions.md` (`make docs`)."""
