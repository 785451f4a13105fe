"""The rtnetlink requests the build sends (testbed.net.rtnl), decoded back: pure, no root.

Requests that name an interface by index look it up in the kernel and are tested live (every
testbed built in tests/live sends them)."""

from __future__ import annotations

import socket

from testbed.net import netlink, rtnl
from testbed.plan.render import BridgeAdd, GsoMaxSegs, LinkUp, RouteAdd


def _attrs(body: bytes, header: int) -> dict[int, bytes]:
    return {k: bytes(v) for k, v in netlink.attributes(memoryview(body), header).items()}


def test_link_up_names_the_link_and_sets_only_the_up_flag() -> None:
    kind, flags, body = rtnl.request(LinkUp("eth0"))
    assert kind == rtnl.RTM_NEWLINK and flags == rtnl.ACK
    _family, _type, index, ifflags, change = rtnl.IFINFOMSG.unpack_from(body)
    assert (index, ifflags, change) == (0, rtnl.IFF_UP, rtnl.IFF_UP)
    assert _attrs(body, rtnl.IFINFOMSG.size) == {rtnl.IFLA_IFNAME: b"eth0\0"}


def test_bridge_is_created_exclusively_without_stp_or_forward_delay() -> None:
    kind, flags, body = rtnl.request(BridgeAdd("br0"))
    assert kind == rtnl.RTM_NEWLINK and flags == rtnl.CREATE
    attrs = _attrs(body, rtnl.IFINFOMSG.size)
    info = _attrs(attrs[rtnl.IFLA_LINKINFO], 0)
    assert info[rtnl.IFLA_INFO_KIND] == b"bridge\0"
    data = _attrs(info[rtnl.IFLA_INFO_DATA], 0)
    assert data == {
        rtnl.IFLA_BR_FORWARD_DELAY: rtnl.U32.pack(0),
        rtnl.IFLA_BR_STP_STATE: rtnl.U32.pack(0),
    }


def test_gso_max_segs() -> None:
    _, _, body = rtnl.request(GsoMaxSegs("eth0", 1))
    assert _attrs(body, rtnl.IFINFOMSG.size)[rtnl.IFLA_GSO_MAX_SEGS] == rtnl.U32.pack(1)


def test_routes_default_and_to_a_prefix_with_a_source() -> None:
    kind, flags, body = rtnl.request(RouteAdd("default", "10.1.0.1"))
    assert kind == rtnl.RTM_NEWROUTE and flags == rtnl.CREATE
    family, dst_len, *_rest = rtnl.RTMSG.unpack_from(body)
    assert (family, dst_len) == (socket.AF_INET, 0)
    assert _attrs(body, rtnl.RTMSG.size) == {rtnl.RTA_GATEWAY: socket.inet_aton("10.1.0.1")}
    _, _, body = rtnl.request(RouteAdd("10.2.3.0/24", "10.9.0.2", "10.1.0.1"))
    fields = rtnl.RTMSG.unpack_from(body)
    assert fields[1] == 24 and fields[4:8] == (
        rtnl.RT_TABLE_MAIN,
        rtnl.RTPROT_BOOT,
        rtnl.RT_SCOPE_UNIVERSE,
        rtnl.RTN_UNICAST,
    )
    assert _attrs(body, rtnl.RTMSG.size) == {
        rtnl.RTA_DST: socket.inet_aton("10.2.3.0"),
        rtnl.RTA_GATEWAY: socket.inet_aton("10.9.0.2"),
        rtnl.RTA_PREFSRC: socket.inet_aton("10.1.0.1"),
    }
