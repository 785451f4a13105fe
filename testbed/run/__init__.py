"""Running experiments: the live Testbed, the sweep driver, ranks, the link self-check, results."""
