"""The exception types of each layer. Every message is meant for a user: it says what is wrong and
what is allowed, so the CLI prints it without a traceback."""

from __future__ import annotations


class TestbedError(Exception):
    """Base of every error the testbed raises on purpose. ``exit_code`` is what the CLI returns."""

    exit_code = 1


class ScenarioError(TestbedError):
    """A scenario file is unreadable or invalid (exit code 2, like a usage error)."""

    exit_code = 2


class UsageError(TestbedError):
    """Command-line options that do not go together (exit code 2)."""

    exit_code = 2


class PlanError(TestbedError):
    """A valid scenario cannot become a network (e.g. no free address block for it)."""


class UnsupportedError(TestbedError):
    """The kernel lacks a feature the scenario needs (message says which and what to do)."""


class NetError(TestbedError):
    """Realizing or tearing down a network failed (a kernel command was refused)."""


class RegistryError(TestbedError):
    """A testbed name is unknown or already taken."""
