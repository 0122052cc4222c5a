"""The release runbook: Argo Rollouts commands on the Rollout `triton` and model actions on a live
Triton (`scripts/runbook`, `python -m serving.runbook`). See serving/runbook/README.md."""
