"""How a WAN direction is emulated: one ``LinkBackend`` per way, chosen once per testbed.

* :class:`~testbed.link.kernel.KernelBackend`: netem for delay/jitter/loss/reorder, ``sch_red``
  for marking profiles (a stock kernel, ``testbed vm``, the Vagrant VM);
* :class:`~testbed.link.kernel.ShapingOnlyBackend`: HTB (and red leaves) only, for a scenario
  with nothing to delay;
* :class:`~testbed.link.userspace.UserspaceBackend`: the delay line (``testbed.link.delayline``,
  a process per wire namespace) behind HTB; it also holds the queue of every direction with an
  ``aqm``.

:func:`~testbed.link.choose.choose_backend` decides from the kernel's features; nothing below it
compares backend names.

This ``__init__`` imports nothing: the delay line runs as ``python -m testbed.link.delayline`` and
must not pay for the backends' imports (pydantic, the plan) at start-up.
"""
