"""Why a V placement with messages under a cap of S activations rarely reaches the period of
its device load: the delays that align its ops cost the memory the cap leaves.

A periodic V schedule of one microbatch per period P = 2 (F + B) (each device's full load,
whole backward) runs on device d its down stage d and up stage 2S-1-d: F_d, F_u, B_u, B_d,
which must tile the period exactly. Along a microbatch's path (F of stages 0..2S-1, then B
back) each op starts at its least time plus a delay that never decreases along the path.
From device d to d + 1 the four ops' phases move by +(F + c), -(F + c), +(B + c), -(B + c)
(c: the message) plus the delays added on those four hops, each counted modulo P. The least
mean delay per device step over long pipelines is the minimum mean cycle (Karp) of the
graph whose nodes are the tilings (phases of the four ops) and whose edge cost is the least
total delay (each hop's delay modulo P) that turns one tiling into the next.

Memory: activations of stage d (and 2S-1-d) live from F to B end. Their sum of lifetimes
is the same on every device (``lifetime_sum``), and with half-size V activations a cap of
S activations holds 2S of them: over a period at most 2S x P stage-activation ticks
(Little's law). The delays lengthen device 0's sum by the whole path's delay, so the cap
leaves (2S P - lifetime_sum) / (S - 1) ticks of delay per device step, about ``slack``.

All of it is counted in ticks of half a slot (F, B and c): a message of one slot is c = 2
ticks (issue 44's fix; c = 1 is the half-length message priced before it). Without messages
the cap leaves three times the delay the alignment needs (F:B = 1:2: 6 ticks per step against
2). With c = 1 the two meet: 2 against 2 + 3/(S - 1) for 1:2 (P = 6), 14 against
14 + 9/(S - 1) for 3:6 (P = 18). With c = 2, a message of one slot at its stated size, 1:2
needs 4 and the cap leaves -2 + 3/(S - 1): no schedule at the load's period fits a cap of S
at all (Little's law); 3:6 needs 10 against 10 + 9/(S - 1), so over the whole path 9 ticks
are left for the turns' own delays and for the peak above the mean, as at c = 1.

Run: python -m experiments.v_period_alignment
"""

from __future__ import annotations

import itertools


def tilings(f: int, b: int) -> list[tuple[int, int, int, int]]:
    """Phases (F_d, F_u, B_u, B_d) of the four ops tiling a period of 2 (f + b)."""
    P = 2 * (f + b)
    out = []
    for phases in itertools.product(range(P), repeat=4):
        busy = [0] * P
        for start, dur in zip(phases, (f, f, b, b)):
            for x in range(dur):
                busy[(start + x) % P] += 1
        if max(busy) == 1:
            out.append(phases)
    return out


def step_cost(src, dst, f: int, b: int, c: int) -> int:
    """The least delay (sum over the four hops) turning tiling ``src`` on device d into
    ``dst`` on device d + 1: the down F and up B move forward along the path (delay adds),
    the up F and down B backward (their earlier op is on device d + 1)."""
    P = 2 * (f + b)
    return ((dst[0] - src[0] - (f + c)) % P + (src[1] - (f + c) - dst[1]) % P
            + (dst[2] - src[2] - (b + c)) % P + (src[3] - (b + c) - dst[3]) % P)


def least_mean_delay(f: int, b: int, c: int) -> float:
    """The minimum mean cycle of the tilings' graph (Karp's algorithm)."""
    nodes = tilings(f, b)
    n = len(nodes)
    cost = [[step_cost(u, v, f, b, c) for v in nodes] for u in nodes]
    inf = float("inf")
    dist = [[0.0] * n] + [[inf] * n for _ in range(n)]
    for k in range(1, n + 1):
        prev, cur = dist[k - 1], dist[k]
        for u in range(n):
            for v in range(n):
                cur[v] = min(cur[v], prev[u] + cost[u][v])
    return min(max((dist[n][v] - dist[k][v]) / (n - k) for k in range(n) if dist[k][v] < inf) for v in range(n))


def lifetime_sum(S: int, f: int, b: int, c: int) -> int:
    """Device 0's stages' least lifetimes (F start to B end) summed: stage 0's covers the
    whole path, stage 2S-1's its own F and B (the same sum on every device)."""
    hops = 2 * (S - 1)  # messages along the V each way (none at the turn on device S-1)
    return (2 * S * f + hops * c + 2 * S * b + hops * c) + (f + b)


def slack(S: int, f: int, b: int, c: int) -> float:
    """Delay per device step a cap of S activations leaves at the load's period."""
    P = 2 * (f + b)
    return (2 * S * P - lifetime_sum(S, f, b, c)) / (S - 1)


def main() -> None:
    print("F:B  c (ticks)  least delay per step  slack per step at S = 16, 32, 64")
    for f, b in ((1, 2), (3, 6)):
        for c in (0, 1, 2):
            room = ", ".join(f"{slack(S, f, b, c):.2f}" for S in (16, 32, 64))
            print(f"{f}:{b}  {c:9}  {least_mean_delay(f, b, c):20.2f}  {room}")


if __name__ == "__main__":
    main()
