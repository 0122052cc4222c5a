"""The names of Triton's canary AnalysisTemplates: analysis.py builds the templates under them,
and the stack config (config.py) refuses a canary step that names any other."""

from __future__ import annotations

LATENCY_TEMPLATE = "triton-canary-latency"
ERRORS_TEMPLATE = "triton-canary-errors"
ACCURACY_TEMPLATE = "triton-canary-accuracy"
TEMPLATES = (LATENCY_TEMPLATE, ERRORS_TEMPLATE, ACCURACY_TEMPLATE)
