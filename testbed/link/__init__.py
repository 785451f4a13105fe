"""How a WAN direction is emulated: one LinkBackend per way (kernel netem, userspace delay line)."""
