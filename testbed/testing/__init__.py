"""Users' tests of their communication code: the rank test harness and the pytest plugin."""
