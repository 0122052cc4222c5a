"""`python -m serving.drift`: the drift agent (settings: `python -m serving.drift --help`)."""

from serving.drift.agent import main

main()
