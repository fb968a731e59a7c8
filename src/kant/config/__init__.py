"""Typed configuration loaded from YAML; errors name the key path."""

from kant.config.policy import Policy, bundled_policies, load_policy, parse_policy

__all__ = ["Policy", "bundled_policies", "load_policy", "parse_policy"]
