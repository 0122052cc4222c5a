"""Validate a Triton model repository before commit; see scripts/validate_model_repo."""

from model_repo_check.findings import Finding, Location, Report, Severity
from model_repo_check.repository import validate_repository
from model_repo_check.target_env import TargetEnvError, gpus_for_env

__all__ = ["Finding", "Location", "Report", "Severity", "TargetEnvError", "gpus_for_env", "validate_repository"]
