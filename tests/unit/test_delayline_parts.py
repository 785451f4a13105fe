"""The delay line's pure parts, without a kernel: config, rules, the per-packet model, packet
messages and verdicts, the hot path over a fake socket, the lateness histogram, the main loop's
timer arithmetic, and the shared netlink framing it uses."""

from __future__ import annotations

import errno
import random
import struct
import time

import pytest

from testbed.core.stats import quantile
from testbed.link import delayline as dl
from testbed.link.delayline.lateness import LatenessHistogram
from testbed.link.delayline.loop import MAX_WAKE_EARLY, DelayLine, learn_oversleep, release
from testbed.link.delayline.model import HOLD, Queue, decide, wire_bytes
from testbed.link.delayline.nfqueue import (
    NF_ACCEPT,
    NF_DROP,
    NFQNL_MSG_VERDICT,
    NFQNL_MSG_VERDICT_BATCH,
    verdict_msg,
)
from testbed.net import netlink
from testbed.net.netlink import NLMSGHDR

# --------------------------------------------------------------------------- moved from tests/live


def test_iptables_rules_argv() -> None:
    add = dl.iptables_rules("w-in", 1001)
    assert add == [
        [
            "iptables",
            "-w",
            "-t",
            "mangle",
            "-A",
            "PREROUTING",
            "-i",
            "w-in",
            "-j",
            "NFQUEUE",
            "--queue-num",
            "1001",
        ]
    ]
    assert all("--queue-bypass" not in r for r in add)
    delete = dl.iptables_delete_rules("w-in", 1001)
    assert delete == [[("-D" if a == "-A" else a) for a in add[0]]]
    assert dl.iptables_rules("x", 3, iptables="ip6tables")[0][0] == "ip6tables"


def test_config_validation() -> None:
    cfg = dl.Config.from_dict({"queues": [{"num": 5, "delay": 0.01}], "stats_file": "/x"})
    assert cfg.queues[0].name == "q5" and cfg.queues[0].maxlen == 262144
    bad = [
        {"queues": []},
        {"queues": [{"num": 1, "loss": 1.5}]},
        {"queues": [{"num": 1, "delay": -1}]},
        {"queues": [{"num": 1}, {"num": 1}]},
        {"queues": [{"num": 70000}]},
        {"queues": [{"num": 1, "dealy": 0.1}]},
        {"queues": [{"num": 1}], "stats_interval": 0},
    ]
    for d in bad:
        with pytest.raises(dl.ConfigError):
            dl.Config.from_dict(d)


def test_lateness_histogram() -> None:
    h = LatenessHistogram()
    for us in range(1, 101):
        h.add_us(us)
    h.add_us(5_000_000)
    s = h.summary()
    assert s["p50"] == 51 and s["p99"] == 100 and s["max"] == 5_000_000 and s["count"] == 101


def test_verdict_message_layout() -> None:
    m = verdict_msg(1001, 42, NF_ACCEPT, batch=True)
    ln, typ, flags, _seq, _pid = NLMSGHDR.unpack_from(m)
    assert ln == len(m) == 32 and typ == (3 << 8) | 3 and flags == 1
    assert m[18:20] == (1001).to_bytes(2, "big")
    assert m[24:32] == (1).to_bytes(4, "big") + (42).to_bytes(4, "big")


# --------------------------------------------------------------------------- helpers


def line_queue(**cfg: object) -> Queue:
    qc = dl.QueueConfig.from_dict({"num": 7, **cfg})
    return Queue(qc, random.Random(1))


def packet_msg(
    num: int, pid: int, *, stamp: float | None, length: int = 1500, tos: int = 2
) -> bytes:
    """An NFQNL_MSG_PACKET as the kernel lays it out (header first, payload last)."""
    attrs = netlink.nla(1, struct.pack(">IHB", pid, 0x0800, 0))  # NFQA_PACKET_HDR
    attrs += netlink.nla(5, struct.pack(">I", 3))  # NFQA_IFINDEX_INDEV: skipped
    if stamp is not None:
        sec = int(stamp)
        attrs += netlink.nla(4, struct.pack(">QQ", sec, round((stamp - sec) * 1e6)))
    attrs += netlink.nla(13, struct.pack(">I", length))  # NFQA_CAP_LEN
    attrs += netlink.nla(10, bytes([0x45, tos]))  # NFQA_PAYLOAD: the first two bytes
    return netlink.message((3 << 8) | 0, 0, 0, struct.pack(">BBH", 0, 0, num) + attrs)


def verdicts(data: bytes) -> list[tuple[int, int, int, int | None]]:
    """(type, queue, id, mark or None) of each verdict message in ``data``."""
    out = []
    for kind, _seq, body in netlink.messages(memoryview(data), len(data)):
        attrs = netlink.attributes(body, 4)
        _verdict, pid = struct.unpack(">II", attrs[2])
        mark = struct.unpack(">I", attrs[3])[0] if 3 in attrs else None
        out.append((kind, struct.unpack_from(">H", body, 2)[0], pid, mark))
    return out


class FakeSocket:
    """recv_into() hands out the given chunks, then would block; send() records."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(chunks)
        self.sent: list[bytes] = []
        self.timeout: float | None = 0.0

    def recv_into(self, buf: bytearray) -> int:
        if not self.chunks:
            raise BlockingIOError
        chunk = self.chunks.pop(0)
        buf[: len(chunk)] = chunk
        return len(chunk)

    def send(self, data: bytes) -> int:
        self.sent.append(bytes(data))
        return len(data)

    def gettimeout(self) -> float | None:
        return self.timeout

    def settimeout(self, t: float | None) -> None:
        self.timeout = t


# --------------------------------------------------------------------------- the per-packet model


def test_decide_holds_a_packet_for_its_delay() -> None:
    q = line_queue(delay=0.025)
    assert decide(q, 1, 10.0, 1500, 0) == HOLD
    assert decide(q, 2, 10.001, 1500, 0) == HOLD
    assert list(q.deadlines) == pytest.approx([10.025, 10.026]) and list(q.ids) == [1, 2]
    assert q.packets == 2 and q.nbytes == 3000 and q.accepted == 0


def test_decide_jitter_keeps_order_and_never_releases_before_arrival() -> None:
    q = line_queue(delay=0.001, jitter=0.005, seed=3)
    arrivals = [i * 1e-4 for i in range(2000)]
    for pid, t in enumerate(arrivals):
        assert decide(q, pid, t, 100, 0) == HOLD
    deadlines = list(q.deadlines)
    assert deadlines == sorted(deadlines)
    assert all(d >= t for d, t in zip(deadlines, arrivals, strict=True))
    assert len(set(deadlines)) > 100  # jitter did move them


def test_decide_loss_and_reorder_answer_at_once() -> None:
    q = line_queue(delay=0.01, loss=1.0)
    assert decide(q, 1, 0.0, 1500, 0) == NF_DROP
    assert q.dropped_loss == 1 and q.packets == 1 and not q.ids
    q = line_queue(delay=0.01, reorder=1.0)
    assert decide(q, 1, 0.0, 1500, 0) == NF_ACCEPT
    assert q.reordered == 1 and q.accepted == 1 and not q.ids
    q = line_queue(delay=0.01, loss=0.5, seed=1)
    drops = sum(decide(q, pid, 0.0, 100, 0) == NF_DROP for pid in range(10_000))
    assert 4_700 < drops < 5_300 and drops == q.dropped_loss


def test_decide_delays_from_the_bottleneck_departure() -> None:
    q = line_queue(delay=0.01, rate=8e6, buffer=200_000)  # 1 MB/s
    assert decide(q, 1, 0.0, 1500, 0) == HOLD
    assert q.deadlines[0] == pytest.approx(1514 / 1e6 + 0.01)
    for pid in range(2, 200):  # the 200 kB buffer overflows
        decide(q, pid, 0.0, 1500, 0)
    assert q.dropped_queue > 0 and q.packets == 199
    assert len(q.ids) == 199 - q.dropped_queue


# --------------------------------------------------------------------------- messages and verdicts


def test_drain_reads_id_stamp_length_and_ecn_bits() -> None:
    line = DelayLine(dl.Config.from_dict({"queues": [{"num": 7}]}))
    q = line_queue(delay=0.01, rate=8e9, buffer=1 << 20)  # a bottleneck reads the TOS byte
    line.queues.append(q)
    line.by_num[7] = q
    stamp = time.time() - 0.5
    rt_off = time.time() - time.monotonic()
    line.sock = FakeSocket([packet_msg(7, 42, stamp=stamp, length=60000, tos=0x03)])  # type: ignore[assignment]
    assert line._drain(1024) == 1
    assert list(q.ids) == [42] and q.nbytes == 60000 and q.ect == 1 and q.ts_fallbacks == 0
    depart = stamp - rt_off + wire_bytes(60000) * 8 / 8e9
    assert q.deadlines[0] == pytest.approx(depart + 0.01, abs=1e-4)
    # without a stamp: the time of recv, counted
    q = line.by_num[7] = line.queues[0] = line_queue(delay=0.01)
    line.sock = FakeSocket([packet_msg(7, 43, stamp=None)])  # type: ignore[assignment]
    assert line._drain(1024) == 1
    assert list(q.ids) == [43] and q.ts_fallbacks == 1 and q.nbytes == 1500


def test_verdict_with_mark_carries_the_mark() -> None:
    m = verdict_msg(9, 5, NF_ACCEPT, mark=0x1)
    assert verdicts(m) == [(NFQNL_MSG_VERDICT, 9, 5, 0x1)]


def test_release_batches_due_packets_around_marked_ones() -> None:
    q = line_queue(delay=0.0)
    now = time.monotonic()
    for pid in range(1, 6):
        q.deadlines.append(now - 0.001)
        q.ids.append(pid)
    q.deadlines.append(now + 60)  # not due
    q.ids.append(6)
    q.marked_ids.add(3)
    out = bytearray()
    release(q, now, out)
    batch, single = NFQNL_MSG_VERDICT_BATCH, NFQNL_MSG_VERDICT
    assert verdicts(out) == [(batch, 7, 2, None), (single, 7, 3, 0x1), (batch, 7, 5, None)]
    assert list(q.ids) == [6] and q.accepted == 5 and not q.marked_ids
    assert q.hist.count == 5 and 1000 <= q.hist.max_us < 1_000_000


def test_drain_over_a_fake_socket() -> None:
    line = DelayLine(dl.Config.from_dict({"queues": [{"num": 7, "delay": 0.05, "loss": 0.0}]}))
    q = line_queue(delay=0.05)
    line.queues.append(q)
    line.by_num[7] = q
    now = time.time()
    msgs = [packet_msg(7, pid, stamp=now) for pid in (1, 2)]
    msgs.append(packet_msg(8, 3, stamp=now))  # a queue this line does not serve: ignored
    msgs.append(packet_msg(7, 4, stamp=now - 3600))  # a bogus stamp: time of recv instead
    # a refused verdict: nlmsgerr (-EINVAL) carrying the request, which names queue 7
    refused = verdict_msg(7, 99, NF_ACCEPT)
    msgs.append(
        netlink.message(netlink.NLMSG_ERROR, 0, 0, struct.pack("=i", -errno.EINVAL) + refused)
    )
    fake = FakeSocket([b"".join(msgs[:2]), b"".join(msgs[2:])])
    line.sock = fake  # type: ignore[assignment]
    assert line._drain(1024) == 4
    assert list(q.ids) == [1, 2, 4] and q.ts_fallbacks == 1 and q.max_held == 3
    assert q.verdict_errors == 1 and q.last_verdict_errno == errno.EINVAL
    assert not fake.sent  # all held: nothing to say yet
    line.by_num[7] = q = line_queue(delay=0.05, loss=1.0)
    line.queues[0] = q
    fake.chunks = [packet_msg(7, 5, stamp=now)]
    assert line._drain(1024) == 1
    assert verdicts(fake.sent[0]) == [(NFQNL_MSG_VERDICT, 7, 5, None)]


# --------------------------------------------------------------------------- lateness and timers


def test_histogram_percentile_is_the_project_quantile_below_one_ms() -> None:
    rng = random.Random(5)
    for n in (1, 2, 7, 100, 1001):
        values = [rng.randrange(0, 1000) for _ in range(n)]
        h = LatenessHistogram()
        for v in values:
            h.add_us(v)
        for p in (0, 1, 25, 50, 90, 99, 100):
            assert h.percentile(p) == pytest.approx(quantile(values, p / 100))


def test_histogram_percentile_is_within_a_bin_above_one_ms() -> None:
    rng = random.Random(6)
    values = [rng.randrange(0, 50_000) for _ in range(500)] + [3_000_000]
    h = LatenessHistogram()
    for v in values:
        h.add_us(v)
    for p in (10, 50, 90, 99):
        assert abs(h.percentile(p) - quantile(values, p / 100)) <= LatenessHistogram.COARSE
    assert h.percentile(100) == 3_000_000 and LatenessHistogram().percentile(50) is None


def test_oversleep_learning_is_bounded() -> None:
    early = 0.0
    for _ in range(200):
        early = learn_oversleep(early, 0.0001)
    assert early == pytest.approx(0.8 * 0.0001, rel=1e-3)
    assert learn_oversleep(early, 10.0) <= MAX_WAKE_EARLY
    assert learn_oversleep(early, -1.0) < early  # a timer that came early: correction shrinks


# --------------------------------------------------------------------------- netlink framing


def test_nla_pads_to_four_bytes() -> None:
    assert netlink.nla(5, b"\x01") == struct.pack("=HH", 5, 5) + b"\x01\0\0\0"
    assert len(netlink.nla(1, b"1234")) == 8 and netlink.align(5) == 8


def test_request_waits_for_its_own_ack() -> None:
    ack = netlink.message(netlink.NLMSG_ERROR, 0, 8, struct.pack("=i", 0) + bytes(16))
    other = netlink.message(netlink.NLMSG_ERROR, 0, 7, struct.pack("=i", 0) + bytes(16))
    sock = FakeSocket([packet_msg(1, 1, stamp=None) + other, ack])
    netlink.request(sock, b"req", 8, bytearray(4096))  # type: ignore[arg-type]
    assert sock.sent == [b"req"] and not sock.chunks and sock.timeout == 0.0  # mode restored
    refused = netlink.message(netlink.NLMSG_ERROR, 0, 9, struct.pack("=i", -errno.EBUSY))
    with pytest.raises(OSError) as e:
        netlink.request(FakeSocket([refused]), b"req", 9, bytearray(4096))  # type: ignore[arg-type]
    assert e.value.errno == errno.EBUSY


def test_restore_input_groups_rules_by_table() -> None:
    rules = dl.iptables_rules("w-in", 1, ce_iface="w-out") + dl.iptables_rules("w-in2", 2)
    text = dl.restore_input(rules)
    assert text.splitlines() == [
        "*mangle",
        "-A PREROUTING -i w-in -j NFQUEUE --queue-num 1",
        "-A POSTROUTING -o w-out -m mark --mark 0x1/0x1 -j TOS --set-tos 0x03/0x03",
        "-A PREROUTING -i w-in2 -j NFQUEUE --queue-num 2",
        "COMMIT",
    ]
    deleted = dl.restore_input(dl.iptables_delete_rules("w-in", 1))
    assert "-D PREROUTING -i w-in -j NFQUEUE --queue-num 1" in deleted.splitlines()
    assert dl.restore_command()[:2] == ["iptables-restore", "--noflush"]
