"""The serving rules as pulumi-policy ResourceValidationPolicies (PolicyPack() itself serves
forever, so __main__.py only constructs it from these)."""

from pulumi_policy import ReportViolation, ResourceValidationArgs, ResourceValidationPolicy
from serving_rules import RULES, Rule

PACK_NAME = "gpu-serving"


def _policy(name: str, rule: Rule) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        for message in rule(args.resource_type, args.props):
            report_violation(message, None)

    return ResourceValidationPolicy(name=name, description=(rule.__doc__ or name).strip(), validate=validate)


def policies() -> list[ResourceValidationPolicy]:
    return [_policy(name, rule) for name, rule in RULES.items()]
