"""The rendezvous at N nodes from counts and per-operation costs: the models behind scale_rendezvous.py's derived
figures. Pure functions: every input is measured by scale_rendezvous.py (request counts on the store server's
side, its CPU per request under a load generator, the handler's own work per attempt) and passed in.

**Static** (Slurm; TrainJob): every agent connects once (validate, ping), counts itself in (one add), writes its
role (one set) and waits for its ranks (wait + get); node 0's agent polls the count every 10 ms, then reads every
role and writes every rank in one multi_get and one multi_set (pytorch#124982's linear rank assignment). One
server thread serves every request, and the last agent has its ranks only once the server has served them all:
``T = sum over request kinds of count(N) x service(N)`` plus one 10 ms poll and a handful of round trips.

**c10d** (PyTorchJob): torch's DynamicRendezvousHandler keeps the whole rendezvous (every participant, every
heartbeat) in one key that each join compare-and-sets (CAS). The successful CASes form one chain: a link is the
winner's own work on the state it got back (decode, add itself, encode) plus a round trip plus the server's CAS —
or, when c agents contend, the server serving all c CASes, since every contender sends one per link and all but
one fail. Agents that have joined poll the key once a second (gets) and, past 5 s, must win a keep-alive CAS in
the same chain; one whose heartbeat is 15 s old is dropped from the state by the others (keep_alive_interval x
keep_alive_max_attempt), so a chain too slow to carry the keep-alives never completes. Agents arrive spread over
a window (torch's own 0-0.3 s jitter when every node starts at once, longer when pods start over image pulls).
:func:`c10d_join` steps that chain link by link.

**mtk's c10d** (a PyTorchJob as mtk renders it): each agent joins ``stagger x its replica index`` after it is ready,
so N agents arrive over ``(N - 1) x stagger`` (torch's 0.3 s jitter on top only smooths them; pods that start apart
only spread them further: the rate of arrivals never exceeds one per stagger). :func:`staggered_holds` asks the
chain whether that completes within the target at a given multiple of the measured costs, over the stagger's window
and wider ones; :func:`highest_cost_factor` finds how far the costs may grow before it does not.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass

POLL_S = 1.0  # a joined c10d agent re-reads the state every second (_Action.SYNC)
KEEP_ALIVE_S = 5.0  # torch's default keep_alive_interval
EXPIRY_S = 15.0  # keep_alive_interval x keep_alive_max_attempt (3): older heartbeats are dropped
STATIC_POLL_S = 0.01  # node 0's TCPStore polls the worker count every 10 ms (TCPStore::waitForWorkers)
TORCH_JITTER_S = 0.3  # DynamicRendezvousHandler delays a first join by uniform(0, 0.3) s


def interpolate(points: dict[int, float]) -> Callable[[float], float]:
    """Piecewise-linear through the measured (x, y) points, linear beyond the ends (costs grow with the state)."""
    xs = sorted(points)
    if not xs:
        raise ValueError("no points to interpolate")
    if len(xs) == 1:
        return lambda _x: points[xs[0]]

    def f(x: float) -> float:
        i = min(max(bisect.bisect_left(xs, x), 1), len(xs) - 1)
        x0, x1 = xs[i - 1], xs[i]
        y0, y1 = points[x0], points[x1]
        return max(0.0, y0 + (y1 - y0) * (x - x0) / (x1 - x0))

    return f


@dataclass
class StaticResult:
    seconds: float
    server_busy_s: float
    requests: float
    by_kind_s: dict[str, float]


def static_join(requests: dict[str, float], service_s: dict[str, float], rtt_s: float,
                round_trips: int = 8) -> StaticResult:
    """Seconds from the last agent's arrival until every agent has its ranks: the server's busy time for every
    request (count x its service time), one of node 0's 10 ms polls, and the last agent's own round trips
    (connect, validate, ping, add, set, wait, get, and node 0's multi_get/multi_set in between)."""
    missing = sorted(set(requests) - set(service_s))
    if missing:
        raise ValueError(f"no service time measured for request kind(s) {', '.join(missing)}")
    by_kind = {k: requests[k] * service_s[k] for k in requests}
    busy = sum(by_kind.values())
    return StaticResult(busy + STATIC_POLL_S + round_trips * rtt_s, busy, sum(requests.values()), by_kind)


@dataclass
class C10dResult:
    seconds_after_last_arrival: float | None  # None: the chain cannot carry the keep-alives (never completes)
    seconds_from_first_arrival: float | None
    cas: float
    failed_cas: float
    keep_alives: float
    polls: float
    bytes: float
    server_busy_s: float
    max_contenders: float
    why: str = ""


def c10d_join(n: int, window_s: float, cycle_s: Callable[[float], float], cas_s: Callable[[float], float],
              get_s: Callable[[float], float], state_bytes: Callable[[float], float], rtt_s: float,
              keep_alive_s: float = KEEP_ALIVE_S, expiry_s: float = EXPIRY_S) -> C10dResult:
    """Step the one-key CAS chain until N agents have joined, agents arriving evenly over ``window_s``.

    Each link is one successful CAS. Its contenders c are the agents that arrived and have not joined, plus the
    joined agents whose keep-alive is due (``keep_alive_s`` after their join or last keep-alive). The link takes
    the longer of one uncontended cycle (the winner's decode/modify/encode, a round trip, the server's CAS) and
    the server serving c CASes, stretched by the server's share spent on the joined agents' once-a-second polls.
    The success goes to a join or a due keep-alive in proportion to their numbers (the first CAS to reach the
    server after a change wins: a draw). A contender then waits c links on average for its turn: when that
    exceeds the time a due heartbeat has left (``expiry_s - keep_alive_s``), joined agents are dropped faster than
    they renew and the chain never completes (returned as None, with why)."""
    if n < 1 or window_s < 0:
        raise ValueError("n >= 1 and window_s >= 0")
    t = 0.0
    joined = 0
    credit = 0.0  # the joins' share of the links so far, not yet turned into a join
    dues: list[float] = []  # when each joined agent's next keep-alive is due (a heap)
    cas = failed = keep_alives = polls = nbytes = busy = max_c = 0.0

    def arrived(at: float) -> float:
        return float(n) if window_s == 0 else min(float(n), math.floor(n * at / window_s + 1e-9))

    while joined < n:
        waiting = arrived(t) - joined
        due = _count_due(dues, t)
        if waiting < 1.0 and due == 0:  # nobody contends: the next agent arrives (the joined keep polling)
            step = max((joined + 1) * window_s / n - t, 0.0)
            next_due = dues[0] if dues else float("inf")
            step = min(step, max(next_due - t, 0.0))
            polls += joined * step / POLL_S
            busy += joined * step / POLL_S * get_s(joined)
            nbytes += joined * step / POLL_S * state_bytes(joined)
            t += step
            continue
        c = max(waiting, 0.0) + due
        max_c = max(max_c, c)
        k = joined + 1
        s_cas = cas_s(k)
        rho = joined * get_s(joined) / POLL_S
        if rho >= 1.0:
            return C10dResult(None, None, cas, failed, keep_alives, polls, nbytes, busy, max_c,
                              f"the joined agents' polls alone saturate the store at {joined} agents")
        link = max(cycle_s(k) + rtt_s + s_cas, c * s_cas) / (1.0 - rho)
        if due and c * link > expiry_s - keep_alive_s:
            return C10dResult(None, None, cas, failed, keep_alives, polls, nbytes, busy, max_c,
                              f"at {joined:,} joined and {c:,.0f} contending, a contender's turn comes every "
                              f"{c * link:,.0f} s on average: heartbeats expire ({expiry_s:g} s) before they are "
                              "renewed, joined agents are dropped")
        cas += c
        failed += c - 1
        nbytes += c * 3 * state_bytes(k)  # expected + desired in, the value now held out
        busy += c * s_cas + joined * link / POLL_S * get_s(joined)
        polls += joined * link / POLL_S
        nbytes += joined * link / POLL_S * state_bytes(joined)
        t += link
        credit += max(waiting, 0.0) / c
        if waiting >= 1.0 and (credit >= 1.0 or due == 0):
            joined += 1
            credit = max(0.0, credit - 1.0)
            heapq.heappush(dues, t + keep_alive_s)
        else:
            heapq.heapreplace(dues, t + keep_alive_s)  # the longest-due keep-alive renewed
            keep_alives += 1
    after = max(t - window_s, 0.0) + POLL_S  # the others see the completion at their next poll
    return C10dResult(after, max(t, window_s) + POLL_S, cas, failed, keep_alives, polls, nbytes, busy, max_c)


def _count_due(dues: list[float], t: float) -> int:
    return sum(1 for d in dues if d <= t) if dues and dues[0] <= t else 0


def uncontended_window_s(n: int, cycle_s: Callable[[float], float], cas_s: Callable[[float], float],
                         rtt_s: float) -> float:
    """The arrival window over which N agents never contend: one uncontended link per agent, back to back."""
    return sum(cycle_s(k) + rtt_s + cas_s(k) for k in range(1, n + 1))


STAGGER_SPREADS = (1.0, 1.5, 2.0, 3.0)  # the stagger's own window, and wider ones (pods that start apart)
Costs = tuple[Callable[[float], float], Callable[[float], float], Callable[[float], float], Callable[[float], float]]


def stagger_window_s(n: int, stagger_s: float) -> float:
    """The spread of N staggered agents' joins: the last waits (N - 1) x stagger after the first."""
    return max(n - 1, 0) * stagger_s


def staggered_join(n: int, stagger_s: float, costs: Costs, rtt_s: float, keep_alive_s: float,
                   spread: float = 1.0) -> C10dResult:
    """:func:`c10d_join` for N agents joining ``stagger_s`` apart (their window x ``spread``), heartbeats expiring
    after 3 keep-alive intervals (torch's keep_alive_max_attempt)."""
    cycle_s, cas_s, get_s, state_bytes = costs
    return c10d_join(n, stagger_window_s(n, stagger_s) * spread, cycle_s, cas_s, get_s, state_bytes, rtt_s,
                     keep_alive_s=keep_alive_s, expiry_s=3 * keep_alive_s)


def staggered_holds(n: int, stagger_s: float, costs: Costs, rtt_s: float, keep_alive_s: float, post_s: float,
                    target_s: float, spreads: tuple[float, ...] = STAGGER_SPREADS) -> bool:
    """Whether N staggered agents complete, every rank assigned (``post_s`` after the last join), within
    ``target_s`` of the first join — over the stagger's window and every wider one in ``spreads`` (the chain is
    not monotone in the window near its capacity: one window that completes does not vouch for its neighbours)."""
    window = stagger_window_s(n, stagger_s)
    for spread in spreads:
        res = staggered_join(n, stagger_s, costs, rtt_s, keep_alive_s, spread)
        if res.seconds_after_last_arrival is None or window + res.seconds_after_last_arrival + post_s > target_s:
            return False
    return True


def highest_cost_factor(holds: Callable[[float], bool], top: float = 8.0, step: float = 0.25) -> float:
    """The largest multiple of the measured per-request costs (1, 1 + step, ... up to ``top``) up to which
    ``holds(factor)`` stays true at every step; 0 when it fails at the measured costs themselves."""
    best, factor = 0.0, 1.0
    while factor <= top + 1e-9 and holds(factor):
        best, factor = factor, factor + step
    return best
