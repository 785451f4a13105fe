"""The userspace delay line (one process per wire namespace), standard library only."""
