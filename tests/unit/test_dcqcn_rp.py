"""DCQCN's reaction and notification points and the offline replay:
pure state machines driven by explicit times."""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import random

import pytest

from testbed.core.dcqcn import DcqcnParams, defaults, dilate
from traffic.dcqcn import NotificationPoint, ReactionPoint, RpCall, rate_trace, replay, replay_calls
from traffic.dcqcn.rp import grid_count

LINE = 40e9
G = 1 / 256


def p_(variant: str = "paper", **kw: object) -> DcqcnParams:
    return dataclasses.replace(defaults(variant), **kw)  # type: ignore[arg-type]


# ---- α ----


@pytest.mark.parametrize("variant", ["paper", "ns3"])
def test_alpha_decays_every_k_without_cnps(variant: str) -> None:
    p = p_(variant)
    k = p.alpha_timer
    a0 = p.alpha0
    one = ReactionPoint(p, LINE)
    many = ReactionPoint(p, LINE)
    if variant == "ns3":  # the author's α timer starts with the first CNP
        one.advance(1.0)
        assert one.alpha == a0 == 0.5
        one, many = ReactionPoint(p, LINE), ReactionPoint(p, LINE)
        one.on_cnp(0.0)
        many.on_cnp(0.0)
        a0 = (1 - G) * a0 + G
    t = 0.0
    for n in (0, 1, 7, 100, 1000):
        # at n·K exactly α has decayed n times: α₀(1 − g)^(t/K)
        t_n = n * k
        one.advance(t_n)
        while t < t_n:  # the same time span in small uneven steps
            t = min(t_n, t + 0.37 * k)
            many.advance(t)
        assert one.alpha == pytest.approx(a0 * (1 - G) ** n, rel=1e-12)
        assert many.alpha == one.alpha  # lazily, whatever the call points: the same float
        # and half a period later nothing more has happened
        one.advance(t_n + k / 2)
        assert one.alpha == pytest.approx(a0 * (1 - G) ** n, rel=1e-12)
    assert many.events == one.events
    if variant == "paper":
        assert one.events == [] and one.rate == LINE  # uncongested: no cut, no increase


def test_alpha_decays_logged_one_event_per_k_when_asked() -> None:
    p = p_("paper")
    rp = ReactionPoint(p, LINE, log_alpha_decay=True)
    rp.advance(10.5 * p.alpha_timer)
    assert [e.kind for e in rp.events] == ["alpha"] * 10
    assert [e.alpha for e in rp.events] == pytest.approx([(1 - G) ** n for n in range(1, 11)])
    # logging changes nothing but the log
    quiet = ReactionPoint(p, LINE)
    quiet.advance(10.5 * p.alpha_timer)
    assert quiet.alpha == rp.alpha


def test_mellanox_alpha_starts_at_one_on_the_first_cnp_and_adds_g_after_a_cnp() -> None:
    p = p_("mellanox", rate_reduce_period=0.0)
    k = p.alpha_timer
    rp = ReactionPoint(p, LINE)
    rp.advance(1.0)
    assert rp.alpha == p.alpha0 and rp.events == []  # no α timer before the first CNP
    rp.on_cnp(1.0)
    assert rp.alpha == 1.0
    rp.advance(1.0 + 10.5 * k)
    assert rp.alpha == pytest.approx((1 - G) ** 10)
    rp.on_cnp(1.0 + 10.7 * k)  # the update at 11·K adds g, the ones after decay
    rp.advance(1.0 + 13.5 * k)
    a11 = (1 - G) * (1 - G) ** 10 + G
    assert rp.alpha == pytest.approx(a11 * (1 - G) ** 2)


# ---- the cut ----


@pytest.mark.parametrize("variant", ["paper", "ns3", "mellanox"])
def test_one_cnp_at_alpha_one_halves_rc_and_sets_rt_to_rc0(variant: str) -> None:
    p = p_(variant, alpha0=1.0, rate_reduce_period=0.0)
    rp = ReactionPoint(p, LINE)
    rp.on_cnp(0.0)  # α = 1 at t0 (ns3: updated first, (1 − g)·1 + g is still 1)
    assert rp.rate == LINE / 2 and rp.target == LINE
    kinds = [e.kind for e in rp.events]
    assert (
        kinds
        == {
            "paper": ["cnp", "cut", "alpha"],
            "ns3": ["cnp", "alpha", "cut"],
            "mellanox": ["cnp", "alpha", "cut"],
        }[variant]
    )
    cut = next(e for e in rp.events if e.kind == "cut")
    assert (cut.rc, cut.rt, cut.stage) == (LINE / 2, LINE, "fast_recovery")


def test_paper_cuts_with_the_old_alpha_ns3_with_the_new() -> None:
    a0 = 0.5
    paper = ReactionPoint(p_("paper", alpha0=a0), LINE)
    paper.on_cnp(0.0)
    assert paper.rate == LINE * (1 - a0 / 2) and paper.alpha == (1 - G) * a0 + G
    ns3 = ReactionPoint(p_("ns3"), LINE)  # α₀ 0.5 is the author's default
    ns3.on_cnp(0.0)
    a1 = (1 - G) * a0 + G
    assert ns3.rate == LINE * (1 - a1 / 2) and ns3.alpha == a1


def test_mellanox_cuts_at_the_next_check_with_the_alpha_of_then() -> None:
    p = p_("mellanox")  # K 1 µs, rate_reduce_period 4 µs
    rp = ReactionPoint(p, LINE)
    rp.on_cnp(0.0)
    assert rp.rate == LINE  # the first check is one period later (HPCC: +1 ns after α)
    rp.advance(4e-6)
    a = (1 - G) ** 4  # four α updates without a CNP, then the check
    assert rp.rate == pytest.approx(LINE * (1 - a / 2), rel=1e-12)
    assert rp.target == LINE  # clamp_target off and no increase since: RT kept


def test_mellanox_cuts_at_most_once_per_rate_reduce_period() -> None:
    p = p_("mellanox")
    period = p.rate_reduce_period
    rp = ReactionPoint(p, LINE)
    t = 0.0
    while t < 200e-6:  # a CNP every 0.7 µs: far more than one per period
        rp.on_cnp(t)
        t += 0.7e-6
    rp.advance(t)
    cuts = [e.t for e in rp.events if e.kind == "cut"]
    assert len(cuts) == grid_count(0.0, period, t)  # one at every check (a CNP came each time)
    assert all(b - a >= period * (1 - 1e-9) for a, b in itertools.pairwise(cuts))
    assert len([e for e in rp.events if e.kind == "cnp"]) > 4 * len(cuts)


def test_paper_with_a_reduce_period_updates_alpha_but_skips_the_cut() -> None:
    rp = ReactionPoint(p_("paper", rate_reduce_period=50e-6), LINE)
    rp.on_cnp(0.0)
    rc = rp.rate
    rp.on_cnp(10e-6)
    assert rp.rate == rc and [e.kind for e in rp.events][-2:] == ["cnp", "alpha"]
    rp.on_cnp(60e-6)
    assert rp.rate < rc


@pytest.mark.parametrize("variant", ["paper", "ns3", "mellanox"])
def test_min_dec_fac_keeps_that_much_of_rc_at_a_cut(variant: str) -> None:
    # HPE's long-haul recipe: RPG_MIN_DEC_FAC=95, a cut of at most 5 %
    rp = ReactionPoint(p_(variant, alpha0=1.0, min_dec_fac=0.95, rate_reduce_period=0.0), LINE)
    rp.on_cnp(0.0)
    assert rp.rate == pytest.approx(0.95 * LINE, rel=1e-12)
    default = ReactionPoint(p_(variant, alpha0=1.0, rate_reduce_period=0.0), LINE)
    default.on_cnp(0.0)
    assert default.rate == LINE / 2  # 50 %: never binds, α/2 <= 0.5


def _hpcc_mlx(p: DcqcnParams, line: float, cnps: list[float], until: float) -> list[tuple]:
    """HPCC's rdma-hw.cc *Mlx logic as its simulator runs it (an independent cross-check): an
    event queue in integer ns, events of one instant in the order they were scheduled, each
    timer rescheduling itself, the cut check 1 ns after α's update. ``cnps`` in ns."""
    q: list[tuple] = []
    seq = itertools.count()
    st = {"rc": line, "rt": line, "alpha": 1.0, "first": True, "a": False, "d": False}
    st |= {"stage": 0, "gen": 0}
    trace: list[tuple[float, float]] = []
    k, rr, tt = (round(x * 1e9) for x in (p.alpha_timer, p.rate_reduce_period, p.rate_timer))

    def at(t: float, name: str, arg: int = 0) -> None:
        heapq.heappush(q, (t, next(seq), name, arg))

    for c in cnps:
        at(c, "cnp")
    while q and q[0][0] <= until:
        t, _, name, arg = heapq.heappop(q)
        if name == "cnp":
            st["a"] = st["d"] = True
            if st["first"]:
                st |= {"alpha": 1.0, "a": False, "first": False, "rt": st["rc"]}
                at(t + k, "alpha")
                at(t + rr + 1, "dec")
        elif name == "alpha":
            a = st["alpha"]
            st["alpha"] = (1 - p.g) * a + p.g if st["a"] else (1 - p.g) * a
            st["a"] = False
            at(t + k, "alpha")
        elif name == "dec":
            at(t + rr, "dec")
            if st["d"]:
                if p.clamp_target or st["stage"] != 0:
                    st["rt"] = st["rc"]
                st["rc"] = max(p.min_rate, st["rc"] * (1 - st["alpha"] / 2))
                st |= {"stage": 0, "d": False, "gen": st["gen"] + 1}
                at(t + tt, "inc", st["gen"])
                trace.append((t, st["rc"]))
        elif arg == st["gen"]:  # an increase timer not cancelled by a cut since
            at(t + tt, "inc", arg)
            f = p.fast_recovery_steps
            if st["stage"] == f:
                st["rt"] = min(line, st["rt"] + p.rai)
            elif st["stage"] > f:
                st["rt"] = min(line, st["rt"] + p.rhai)
            st["rc"] = st["rc"] / 2 + st["rt"] / 2
            st["stage"] += 1
            trace.append((t, st["rc"]))
    trace = [(t * 1e-9, rc) for t, rc in trace]
    out: list[tuple[float, float]] = []
    for t, rc in trace:
        if not out or rc != out[-1][1]:
            out.append((t, rc))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mellanox_matches_hpccs_event_driven_mlx_logic(seed: int) -> None:
    p = p_("mellanox")
    rng = random.Random(seed)
    cnps: list[float] = []
    t = 0.0
    while t < 30e6:  # ns: bursts of CNPs with calm gaps between, off the integer ns
        t = int(t + rng.choice([rng.uniform(500, 3000), rng.uniform(0.5e6, 3e6)])) + 0.5
        cnps.append(t)
    until = 40e6
    ours = rate_trace(replay(p, LINE, [], [c * 1e-9 for c in cnps], until=until * 1e-9))
    ref = _hpcc_mlx(p, LINE, cnps, until)
    ours = [(t, rc) for t, rc in ours if rc != LINE or t > 0][1:]  # from the first cut on
    assert len(ours) == len(ref) > 50
    for (ta, ra), (tb, rb) in zip(ours, ref, strict=True):
        assert ta == pytest.approx(tb, abs=1.1e-9)  # HPCC's check runs 1 ns after the instant
        assert ra == pytest.approx(rb, rel=1e-9)


def _author_ns3(
    p: DcqcnParams, line: float, cnps: list[float], sends: list[tuple[float, int]], until: float
) -> list[tuple[float, float]]:
    """The author's qbb-net-device.cc rpr_* handlers as ns-3 runs them (an independent
    cross-check): an event queue in integer ns, each timer rescheduling itself, the byte
    budget counted down per datagram. ``cnps`` and ``sends`` in ns."""
    q: list[tuple] = []
    seq = itertools.count()
    f, bc, g = p.fast_recovery_steps, p.byte_counter or 0, p.g
    k, tt = round(p.alpha_timer * 1e9), round(p.rate_timer * 1e9)
    st = {"rc": line, "rt": line, "alpha": p.alpha0, "stage": 0, "bs": 0, "ts": 0, "tx": bc}
    st |= {"tgen": 0, "agen": 0}
    trace: list[tuple[float, float]] = []

    def at(t: float, name: str, arg: object = 0) -> None:
        heapq.heappush(q, (t, next(seq), name, arg))

    def adjust(inc: float) -> None:
        if (st["bs"] == 1 or st["ts"] == 1) and st["rt"] > 10 * st["rc"]:
            st["rt"] /= 8
        else:
            st["rt"] += inc
        st["rc"] = min(line, st["rc"] / 2 + st["rt"] / 2)

    def hyper() -> None:
        adjust(p.rhai * (min(st["bs"], st["ts"]) - f + 1))
        st["stage"] = 3

    def active_increase() -> None:
        adjust(p.rai)
        st["stage"] = 2

    def active_select() -> None:
        if st["bs"] < f or st["ts"] < f:
            active_increase()
        else:
            hyper()

    def fast(counter: str) -> None:
        if st[counter] < f:
            adjust(0)
            st["stage"] = 1
        else:
            active_select()

    for c in cnps:
        at(c, "cnp")
    for t, n in sends:
        at(t, "send", n)
    while q and q[0][0] <= until:
        t, _, name, arg = heapq.heappop(q)
        if name == "cnp":
            if p.clamp_target or st["bs"] or st["ts"]:
                st["rt"], st["tx"] = st["rc"], bc
            st["bs"] = st["ts"] = 0
            st["alpha"] = (1 - g) * st["alpha"] + g
            st["rc"] = max(p.min_rate, st["rc"] * (1 - st["alpha"] / 2))
            st["agen"] += 1
            at(t + k, "alpha", st["agen"])
            st["tgen"] += 1
            at(t + tt, "timer", st["tgen"])
            st["stage"] = 1
        elif name == "alpha" and arg == st["agen"]:
            st["alpha"] *= 1 - g
            at(t + k, "alpha", arg)
        elif name == "timer" and arg == st["tgen"]:
            stage = st["stage"]
            st["ts"] += 1
            at(t + (tt / 2 if stage == 3 else tt), "timer", arg)
            if stage == 1:
                fast("ts")
            elif stage == 2:
                active_select()
            else:
                hyper()
        elif name == "send" and bc:
            if st["stage"] == 0:
                st["tx"] = bc
                continue
            st["tx"] -= arg
            if st["tx"] < 0:
                stage = st["stage"]
                st["bs"] += 1
                st["tx"] = bc // 2 if stage == 3 else bc
                if stage == 1:
                    fast("bs")
                elif stage == 2:
                    active_increase()
                else:
                    hyper()
        else:
            continue
        trace.append((t * 1e-9, st["rc"]))
    out: list[tuple[float, float]] = []
    for t, rc in trace:
        if not out or rc != out[-1][1]:
            out.append((t, rc))
    return out


@pytest.mark.parametrize(
    "overrides",
    [{}, {"byte_counter": 30_000}, {"byte_counter": 30_000, "clamp_target": False}],
)
def test_ns3_matches_the_authors_event_driven_logic(overrides: dict) -> None:
    p = p_("ns3", **overrides)
    line = 10e9
    rng = random.Random(5)
    cnps: list[float] = []
    t = 0.0
    while t < 30e6:  # ns, off the integer ns (sends at .25, CNPs at .5)
        t = int(t + rng.choice([rng.uniform(500, 3000), rng.uniform(0.3e6, 3e6)])) + 0.5
        cnps.append(t)
    sends = [(i * 1000 + 0.25, 1000) for i in range(40_000)]  # 8 Gbit/s of 1000 B datagrams
    until = 40e6
    ours = rate_trace(
        replay(
            p, line, [(t * 1e-9, n) for t, n in sends], [c * 1e-9 for c in cnps], until=until * 1e-9
        )
    )[1:]
    ref = _author_ns3(p, line, cnps, sends, until)
    assert len(ours) == len(ref) > 100
    for (ta, ra), (tb, rb) in zip(ours, ref, strict=True):
        assert ta == pytest.approx(tb, abs=1e-12)
        assert ra == pytest.approx(rb, rel=1e-9)


# ---- the increase ----


@pytest.mark.parametrize("variant", ["paper", "ns3", "mellanox"])
def test_fast_recovery_halves_rt_minus_rc_each_step(variant: str) -> None:
    f = 5
    p = p_(variant, alpha0=1.0, rate_reduce_period=0.0, fast_recovery_steps=f, byte_counter=None)
    tt = p.rate_timer
    rp = ReactionPoint(p, LINE)
    rp.on_cnp(0.0)
    gap0 = rp.target - rp.rate
    assert gap0 == LINE / 2
    # paper counts the event first (FR while T <= F: F steps); mellanox reads the stage first
    # (FR while stage < F: F steps too); the author's code counts first and recovers while
    # T < F: F - 1 steps
    steps = f - 1 if variant == "ns3" else f
    for k in range(1, steps + 2):
        if k == steps + 1:  # and the next step is additive
            rp.advance((k + 0.5) * tt)
            assert rp.events[-1].stage == "additive"
            assert rp.target == LINE + (p.rai if variant == "ns3" else 0)  # ns3: RT unclamped
            break
        rp.advance((k + 0.5) * tt)
        assert rp.target == LINE
        assert rp.target - rp.rate == pytest.approx(gap0 / 2**k, rel=1e-12)
        assert rp.events[-1].kind == "increase_timer"
        assert rp.events[-1].stage == "fast_recovery"
        assert rp.events[-1].t == pytest.approx(k * tt)


def _cut_twice(rp: ReactionPoint, t: float) -> None:
    """Bring RT below the line rate (so increases are not clamped): two cuts at α ≈ 1."""
    rp.on_cnp(t)
    if not rp.params.clamp_target:  # mellanox: RT = RC on a cut only after an increase
        rp.advance(t + rp.params.rate_timer)
    rp.on_cnp(rp.t)
    assert rp.target < LINE


def test_additive_and_hyper_increase_paper() -> None:
    b = 1000
    p = p_("paper", alpha0=1.0, rate_timer=1.0, byte_counter=b, fast_recovery_steps=2)
    rp = ReactionPoint(p, LINE)
    _cut_twice(rp, 0.0)
    t = 0.001

    def step(expect_stage: str, expect_drt: float, *, timer: bool = False) -> None:
        nonlocal t
        rt, rc = rp.target, rp.rate
        if timer:
            t = rp.last_cut + (rp.timer_stage + 1) * p.rate_timer  # type: ignore[operator]
            rp.advance(t)
        else:
            t += 0.001
            rp.on_sent(t, b)
        e = rp.events[-1]
        assert e.stage == expect_stage
        assert e.kind == ("increase_timer" if timer else "increase_bytes")
        assert rp.target - rt == pytest.approx(expect_drt, rel=1e-12)
        assert rp.rate == pytest.approx((rp.target + rc) / 2, rel=1e-12)

    step("fast_recovery", 0)  # BC 1
    step("fast_recovery", 0)  # BC 2
    step("additive", p.rai)  # BC 3 > F, T 0
    step("additive", p.rai, timer=True)  # T 1
    step("additive", p.rai, timer=True)  # T 2
    step("hyper", p.rhai, timer=True)  # min(T 3, BC 3) − F = 1
    step("hyper", p.rhai)  # BC 4, min still 3
    step("hyper", 2 * p.rhai, timer=True)  # min(4, 4) − F = 2


def test_additive_and_hyper_increase_ns3() -> None:
    """The author's stages: FR while the event's counter < F, then active select (hyper
    RHAI·(min − F + 1) once min >= F), a byte event in AI always AI, the hyper timer at T/2
    and the hyper byte budget B/2; the budget counts down per datagram, no carry."""
    b, tt = 1000, 1.0
    p = p_("ns3", alpha0=1.0, rate_timer=tt, byte_counter=b, fast_recovery_steps=2)
    rp = ReactionPoint(p, LINE)
    _cut_twice(rp, 0.0)
    cut = rp.last_cut
    assert cut is not None
    t = 0.001

    def step(stage: str, drt: float, *, at: float | None = None, nbytes: int = b + 1) -> None:
        nonlocal t
        rt, rc = rp.target, rp.rate
        if at is not None:
            t = at
            rp.advance(t)
        else:
            t += 0.001
            rp.on_sent(t, nbytes)
        e = rp.events[-1]
        assert (e.kind, e.stage) == ("increase_timer" if at else "increase_bytes", stage)
        assert rp.target - rt == pytest.approx(drt, rel=1e-12)
        assert rp.rate == pytest.approx((rp.target + rc) / 2, rel=1e-12)

    rp.on_sent(t, b)  # the budget reaches 0, not below: no event
    assert rp.events[-1].kind == "cut"
    step("fast_recovery", 0, nbytes=1)  # BC 1 < F
    step("additive", p.rai)  # BC 2 = F: active select, min(T 0, BC 2) < F
    step("additive", p.rai)  # BC 3: a byte event in AI is AI
    step("additive", p.rai, at=cut + tt)  # T 1: active select, min 1 < F
    step("hyper", p.rhai, at=cut + 2 * tt)  # T 2: min(2, 3) − F + 1 = 1
    step("hyper", p.rhai)  # BC 4: hyper, budget now B/2
    step("hyper", 2 * p.rhai, at=cut + 3 * tt)  # T 3, handled in hyper: next one T/2 later
    step("hyper", 3 * p.rhai, at=cut + 3.5 * tt)  # min(4, 4) − F + 1 = 3
    step("hyper", 3 * p.rhai, nbytes=b // 2 + 1)  # BC 5 after B/2 (+1), min still 4


def test_ns3_divides_a_far_target_by_8_on_the_first_event_after_a_cut() -> None:
    """The author's AdjustRates keeps QCN's rule: RT > 10·RC on a counter's first event →
    RT /= 8. It shows when RT survives cuts (clamp_target False, no increase between)."""
    p = p_("ns3", alpha0=1.0, clamp_target=False, byte_counter=None)
    rp = ReactionPoint(p, LINE)
    for i in range(4):  # RT stays at the line rate, RC halves four times
        rp.on_cnp(i * 1e-6)
    assert rp.target == LINE and rp.rate == LINE / 16
    rp.advance(3e-6 + 1.5 * p.rate_timer)
    assert rp.target == LINE / 8 and rp.rate == (LINE / 16 + LINE / 8) / 2


def test_mellanox_additive_then_constant_hyper_increase() -> None:
    p = p_("mellanox", rate_reduce_period=0.0)  # F = rpg_threshold 1
    tt = p.rate_timer
    rp = ReactionPoint(p, LINE)
    _cut_twice(rp, 0.0)
    t0 = rp.t
    expect = [("fast_recovery", 0.0), ("additive", p.rai)] + [("hyper", p.rhai)] * 4
    for k, (stage, drt) in enumerate(expect, start=1):
        rt, rc = rp.target, rp.rate
        rp.advance(t0 + (k + 0.5) * tt)
        e = rp.events[-1]
        assert (e.kind, e.stage) == ("increase_timer", stage)
        assert rp.target - rt == pytest.approx(drt, rel=1e-12)
        assert rp.rate == pytest.approx((rp.target + rc) / 2, rel=1e-12)


def test_byte_counter_triggers_an_increase_every_b_bytes_paper() -> None:
    b = 1000
    rp = ReactionPoint(p_("paper", rate_timer=10.0, byte_counter=b), LINE)
    rp.on_cnp(0.0)
    t = 0.0
    for _ in range(20):  # 250 B a send: an event every fourth
        t += 1e-6
        rp.on_sent(t, 250)
    rp.on_sent(t + 1e-6, 3500)  # three events at once, 500 B carried
    inc = [e for e in rp.events if e.kind.startswith("increase")]
    assert [e.kind for e in inc] == ["increase_bytes"] * 8
    assert [e.t for e in inc[:5]] == pytest.approx([4e-6 * k for k in range(1, 6)])
    assert rp.byte_stage == 8 and rp.bytes_since == 500
    rp.on_cnp(t + 2e-6)  # a cut resets the counters and the byte count
    assert (rp.byte_stage, rp.timer_stage, rp.bytes_since) == (0, 0, 0)


def test_mellanox_has_no_byte_counter() -> None:
    p = p_("mellanox", byte_counter=1000, rate_timer=10.0)  # a B is ignored: timer only
    rp = ReactionPoint(p, LINE)
    rp.on_cnp(0.0)
    for k in range(1, 1000):
        rp.on_sent(k * 1e-6, 1500)
    assert not [e for e in rp.events if e.kind.startswith("increase")]
    assert rp.bytes_total == 999 * 1500


@pytest.mark.parametrize("variant", ["paper", "ns3", "mellanox"])
def test_rc_stays_between_min_rate_and_line_rate(variant: str) -> None:
    p = p_(variant, min_rate=1e9, rai=5e9, rhai=20e9, byte_counter=None)
    rp = ReactionPoint(p, LINE)
    t = 0.0
    for _ in range(200):  # a CNP storm: RC floors at min_rate
        rp.on_cnp(t)
        t += 1e-6
    rp.advance(t + 1e-5)
    assert rp.rate == p.min_rate
    rp.advance(t + 2000 * p.rate_timer)  # a long calm: back to exactly the line rate
    assert rp.rate == pytest.approx(LINE, rel=1e-12) and rp.target >= LINE
    assert all(p.min_rate <= e.rc <= LINE for e in rp.events)
    # RT is clamped to the line rate too, except in the author's code
    assert variant == "ns3" or all(e.rt <= LINE for e in rp.events)
    n = len(rp.events)
    rp.advance(t + 4000 * p.rate_timer)
    assert len(rp.events) == n  # at the line rate the timer is disarmed: nothing logged


def test_calls_are_recorded_unless_asked_not_to() -> None:
    rp = ReactionPoint(p_(), LINE)
    rp.on_sent(1e-6, 1500)
    rp.on_cnp(2e-6)
    rp.advance(3e-6)
    assert rp.calls == [RpCall(1e-6, "sent", 1500), RpCall(2e-6, "cnp"), RpCall(3e-6, "advance")]
    quiet = ReactionPoint(p_(), LINE, record_calls=False)
    for c in rp.calls:
        quiet.apply(c)
    assert quiet.calls == [] and quiet.events == rp.events


def test_calls_may_not_go_back_in_time() -> None:
    rp = ReactionPoint(p_(), LINE)
    rp.advance(1.0)
    with pytest.raises(ValueError, match="before"):
        rp.on_cnp(0.5)


# ---- replay and the call granularity ----


def _live_run(p: DcqcnParams, seed: int, *, log_alpha_decay: bool = False) -> ReactionPoint:
    """A sender loop: ticks of ~200 µs, each drains CNPs, then sends paced packets."""
    rng = random.Random(seed)
    rp = ReactionPoint(p, LINE / 1000, log_alpha_decay=log_alpha_decay)
    t = 0.0
    for _ in range(400):
        t += rng.uniform(150e-6, 250e-6)
        rp.advance(t)
        if rng.random() < 0.3:
            rp.on_cnp(t + rng.uniform(0, 10e-6))
        n = int(rp.rate * 200e-6 / 8 / 1500)
        for i in range(n):
            # off the timers' grids: with s != 2^k a send exactly on an instant i·K could
            # fall either side of it once dilated (float rounding), not a DCQCN difference
            rp.on_sent(rp.t + i * 1.0137e-7, 1500)
    return rp


@pytest.mark.parametrize("variant", ["paper", "ns3", "mellanox"])
def test_replay_of_the_calls_reproduces_the_events_exactly(variant: str) -> None:
    p = p_(variant, byte_counter=30_000 if variant != "mellanox" else None)
    live = _live_run(p, seed=1)
    assert len({e.kind for e in live.events}) >= 4
    assert replay_calls(p, live.line_rate, live.calls).events == live.events
    # the calls read back from a file are plain tuples
    rows = [tuple(c) for c in live.calls]
    assert replay_calls(p, live.line_rate, rows).events == live.events


@pytest.mark.parametrize("variant", ["paper", "ns3", "mellanox"])
@pytest.mark.parametrize("log_alpha_decay", [False, True])
def test_sends_and_cnps_alone_reproduce_the_live_trace(variant: str, log_alpha_decay: bool) -> None:
    """advance() calls never change the result: the log of sends and CNP arrivals is enough."""
    p = p_(variant, byte_counter=30_000 if variant != "mellanox" else None)
    live = _live_run(p, seed=2, log_alpha_decay=log_alpha_decay)
    sends = [(c.t, c.nbytes) for c in live.calls if c.op == "sent"]
    cnps = [c.t for c in live.calls if c.op == "cnp"]
    events = replay(p, live.line_rate, sends, cnps, until=live.t, log_alpha_decay=log_alpha_decay)
    assert events == live.events
    assert rate_trace(events) == rate_trace(live.events)
    assert min(rc for _, rc in rate_trace(events)) < 0.9 * live.line_rate


def test_replay_puts_a_cnp_before_a_send_at_the_same_instant() -> None:
    p = p_("paper", byte_counter=1000, rate_timer=10.0)
    events = replay(p, LINE, [(1e-3, 1000), (2e-3, 1000)], [1e-3])
    assert [e.kind for e in events] == ["cnp", "cut", "alpha", "increase_bytes", "increase_bytes"]
    rp = ReactionPoint(p, LINE)
    for c in [RpCall(1e-3, "cnp"), RpCall(1e-3, "sent", 1000), RpCall(2e-3, "sent", 1000)]:
        rp.apply(c)
    assert rp.events == events


# ---- time dilation ----


@pytest.mark.parametrize("variant", ["paper", "ns3", "mellanox"])
@pytest.mark.parametrize("s", [4.0, 100.0])
def test_dilated_rp_follows_the_same_normalised_trajectory(variant: str, s: float) -> None:
    """times x s, rates / s, bytes kept: RC/line rate is the same function of t/s."""
    p = p_(variant, byte_counter=30_000 if variant != "mellanox" else None)
    real = _live_run(p, seed=3)
    emu = replay_calls(
        dilate(p, s),
        real.line_rate / s,
        [RpCall(c.t * s, c.op, c.nbytes) for c in real.calls],
    )
    assert [e.kind for e in emu.events] == [e.kind for e in real.events]
    assert [e.stage for e in emu.events] == [e.stage for e in real.events]
    for a, b in zip(real.events, emu.events, strict=True):
        assert b.t == pytest.approx(a.t * s, rel=1e-12)
        assert b.rc / emu.line_rate == pytest.approx(a.rc / real.line_rate, rel=1e-9)
        assert b.rt / emu.line_rate == pytest.approx(a.rt / real.line_rate, rel=1e-9)
        assert b.alpha == pytest.approx(a.alpha, rel=1e-9)
    if s == 4.0:  # a power of two scales every float exactly
        assert [e.rc / emu.line_rate for e in emu.events] == [
            e.rc / real.line_rate for e in real.events
        ]


# ---- the notification point ----

N = 50e-6


def test_np_sends_a_cnp_at_once_on_a_ce_and_at_most_one_per_n() -> None:
    np_ = NotificationPoint(p_("paper"))
    assert np_.on_packet(0.0, "a", ce=False) is False
    assert np_.on_packet(1e-6, "a", ce=True) is True  # no CNP in the last N: at once
    assert np_.on_packet(2e-6, "a", ce=True) is False  # inside the window: deferred
    assert np_.on_packet(3e-6, "a", ce=False) is False
    assert np_.next_due() == pytest.approx(1e-6 + N)
    assert np_.due(40e-6) == []
    assert np_.due(1e-6 + N) == ["a"]  # the deferred CNP, N after the first
    assert np_.next_due() is None
    assert np_.due(1.0) == []  # no mark since: nothing more
    # an unmarked packet carries a due deferred CNP too
    np_.on_packet(2.0, "a", ce=True)
    np_.on_packet(2.0 + 1e-6, "a", ce=True)
    assert np_.on_packet(2.0 + N + 1e-6, "a", ce=False) is True
    assert [t for t, _ in np_.sent] == pytest.approx([1e-6, 1e-6 + N, 2.0, 2.0 + N + 1e-6])
    assert np_.count == 4
    quiet = NotificationPoint(p_("paper"), record=False)
    assert quiet.on_packet(0.0, "a", ce=True) and quiet.sent == [] and quiet.count == 1


def test_np_cnp_spacing_is_at_least_n_per_flow() -> None:
    rng = random.Random(7)
    np_ = NotificationPoint(p_("paper"))
    t = 0.0
    for _ in range(20_000):
        t += rng.expovariate(1 / 3e-6)  # ~330 kpps over four flows, 30 % marked
        flow = rng.randrange(4)
        np_.on_packet(t, flow, ce=rng.random() < 0.3)
        if rng.random() < 0.05:  # the receiver loop polls now and then
            np_.due(t)
    per_flow: dict[int, list[float]] = {}
    for ts, f in np_.sent:
        per_flow.setdefault(f, []).append(ts)
    assert set(per_flow) == {0, 1, 2, 3}
    for ts in per_flow.values():
        gaps = [b - a for a, b in itertools.pairwise(ts)]
        assert min(gaps) >= N
        assert len(ts) > 0.5 * t / N  # marks everywhere: close to one per N per flow


def test_np_per_port_shares_one_n_across_flows() -> None:
    np_ = NotificationPoint(p_("paper", cnp_per_port=True))
    assert np_.on_packet(0.0, "a", ce=True) is True
    assert np_.on_packet(1e-6, "b", ce=True) is False  # the port sent one for "a" just now
    assert np_.on_packet(2e-6, "c", ce=True) is False
    assert np_.due(N) == ["b"]  # one per N for the port, oldest mark first
    assert np_.due(N + 1e-6) == []
    assert np_.due(2 * N) == ["c"]
    ts = [t for t, _ in np_.sent]
    assert all(b - a >= N for a, b in itertools.pairwise(ts))
    # per flow, the same marks would have given three CNPs at once
    per_flow = NotificationPoint(p_("paper"))
    assert [per_flow.on_packet(t, f, True) for t, f in [(0, "a"), (1e-6, "b"), (2e-6, "c")]] == [
        True,
        True,
        True,
    ]
