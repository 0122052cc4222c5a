"""Canary analysis for model releases (issue 15): the golden-set accuracy program, an
Argo-Rollouts-semantics runner of the AnalysisTemplates, and a step driver for the serving lab."""
