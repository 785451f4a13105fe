"""The kernel objects of one testbed: namespaces, netlink framing, build and teardown, the
registry of live testbeds, the kernel probe and process handshakes."""
