"""Scenario files to validated runs: schema, YAML loading and error wording, sweeps,
expectations."""
