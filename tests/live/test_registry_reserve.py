"""The registry reserves an exact prefix and address slot (one topology over several
machines has the same prefix and block on each), and refuses them when taken on this machine."""

from __future__ import annotations

import secrets

import pytest
from helpers import unique_name

from testbed.core.errors import RegistryError
from testbed.net import registry

pytestmark = pytest.mark.live


def test_an_exact_prefix_and_slot_are_reserved_once(root):
    with registry.locked():
        used = {r.slot for r in registry.records()}
    slot = max(s for s in registry.SLOTS if s not in used)
    prefix = f"{registry.PREFIX_STEM}{secrets.token_hex(2)}"
    rec = registry.claim(unique_name("reserve"), prefix=prefix, slot=slot)
    try:
        assert (rec.prefix, rec.slot) == (prefix, slot)
        with pytest.raises(RegistryError, match=rf"address block 10\.{slot}\.0\.0/16 is taken"):
            registry.claim(unique_name("reserve"), slot=slot)
        with pytest.raises(RegistryError, match=f"prefix {prefix} is taken"):
            registry.claim(unique_name("reserve"), prefix=prefix)
        with pytest.raises(RegistryError, match=r"slot 300 is outside 64\.\.191"):
            registry.claim(unique_name("reserve"), slot=300)
        with pytest.raises(RegistryError, match="'bad' is not a testbed prefix"):
            registry.claim(unique_name("reserve"), prefix="bad")
    finally:
        rec.remove()
