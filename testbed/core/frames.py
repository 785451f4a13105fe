"""Frame accounting shared by the plan, the delay line, the self-check and the analysis.

HTB on a veth counts the 14-byte Ethernet header but no preamble/FCS, and TCP with timestamps
carries 1448 payload bytes in a 1514-byte frame; a GSO packet repeats the 52 bytes of IP+TCP
headers (and is counted with one Ethernet header) per segment.
"""

MTU = 1500
ETH_HEADER = 14
TCP_IP_HEADERS = 52  # IPv4 20 + TCP 20 + timestamps 12
FRAME_BYTES = MTU + ETH_HEADER
MSS = MTU - TCP_IP_HEADERS
TCP_PAYLOAD = MSS


def goodput_factor(mtu: int = MTU) -> float:
    """TCP payload bytes per frame byte with full-size frames of ``mtu`` (1450 on a testbed
    whose cables cross a 1500-byte underlay)."""
    return (mtu - TCP_IP_HEADERS) / (mtu + ETH_HEADER)


GOODPUT_FACTOR = goodput_factor()

# UDP: 8-byte header, so a full-size datagram carries 1472 bytes in the same 1514-byte frame.
UDP_IP_HEADERS = 28
UDP_PAYLOAD = MTU - UDP_IP_HEADERS
