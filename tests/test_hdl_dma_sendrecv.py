"""The sendrecv unit RTL (``ncrtl.hdl.dma.sendrecv.SendRecv``): two units, each with its SBUF,
linked as the two cores of an LNC = 2 logical core, against the golden
:func:`ncrtl.model.dma.sendrecv.exchange`."""

import numpy as np
import pytest

from ncrtl.hdl.dma.sendrecv import SendRecv as Unit
from ncrtl.hdl.dma.sendrecv import encode_sendrecv
from ncrtl.model.dma.sendrecv import PENDING, Code, SendRecv, Tile, exchange

P, B, W, PIPES, DEPTH = 16, 512, 8, 4, 4
SLOT = 16  # bytes per partition of each destination slot (upper half of the SBUF)


def _tile(rng, parts, count, esize, lo, hi):
    """A tile of ``parts`` x ``count`` elements in bytes ``[lo, hi)`` of random partitions."""
    nbytes = count * esize
    byte = lo + esize * int(rng.integers(0, (hi - lo - nbytes) // esize + 1))
    return Tile(int(rng.integers(0, P - parts + 1)), parts, byte, count, esize)


def _program(rng, n_pairs, broken):
    assert n_pairs * SLOT <= B // 2 - SLOT, "the destination slots must fit the upper half"
    """Two cores' programs: ``n_pairs`` pairs on random pipes, posted in a different random
    order on each core (each pipe in its order); sources in the lower half of each SBUF,
    each destination in its own slot of the upper half, so the result does not depend on
    the order pairs run in.  ``broken``: the share of pairs with a rule broken on one side.
    One sendrecv without a partner closes the program of core 0."""
    assert n_pairs < PIPES * DEPTH
    per_core = [[], []]
    # at most DEPTH sendrecvs per pipe and core (the lone one included), so that posting
    # never blocks: the condition under which any posting order pairs without deadlock
    pipes = [int(p) for p in rng.permutation([p for p in range(PIPES) for _ in range(DEPTH)])]
    pipes.remove(PIPES - 1)
    for k in range(n_pairs):
        pipe = pipes[k]
        esize = int(rng.choice([1, 2, 4]))
        gpsimd = rng.random() < 0.2
        parts = 16 if gpsimd else int(rng.integers(1, P + 1))
        count = int(rng.integers(1, SLOT // esize + 1))
        engine = "gpsimd_dma" if gpsimd else "dma"
        ops = []
        for r in (0, 1):
            src = _tile(rng, parts, count, esize, 0, B // 2)
            dst = _tile(rng, parts, count, esize, B // 2 + SLOT * k, B // 2 + SLOT * (k + 1))
            ops.append(SendRecv(src, dst, 1 - r, 1 - r, pipe, engine, tag=k))
        if rng.random() < broken:
            r = int(rng.integers(0, 2))
            o = ops[r]
            how = int(rng.integers(0, 6))
            if how == 0:
                o = SendRecv(o.src, o.dst, r, 1 - r, pipe, engine, tag=k)  # RANK
            elif how == 1 and count > 1:  # SHAPE on one side
                o = SendRecv(
                    o.src,
                    Tile(o.dst.partition, parts, o.dst.byte, count - 1, esize),
                    1 - r,
                    1 - r,
                    pipe,
                    engine,
                    tag=k,
                )
            elif how == 2 and count > 1:  # both shapes right, the pair's disagree: PAIR
                t = [Tile(x.partition, parts, x.byte, count - 1, esize) for x in (o.src, o.dst)]
                o = SendRecv(t[0], t[1], 1 - r, 1 - r, pipe, engine, tag=k)
            elif how == 3:  # partitions past the SBUF: TENSOR
                t = Tile(P - parts + 1, parts, o.dst.byte, count, esize) if parts > 1 else o.dst
                o = SendRecv(o.src, t, 1 - r, 1 - r, pipe, engine, tag=k)
            elif how == 4:  # the other path, or too few partitions for gpsimd: PAIR or LIMIT
                o = SendRecv(
                    o.src, o.dst, 1 - r, 1 - r, pipe, "dma" if gpsimd else "gpsimd_dma", tag=k
                )
            else:  # receive into what is sent: OVERLAP
                o = SendRecv(o.src, o.src, 1 - r, 1 - r, pipe, engine, tag=k)
            ops[r] = o
        for r in (0, 1):
            per_core[r].append(ops[r])
    programs = []
    for r in (0, 1):
        order = [int(i) for i in rng.permutation(n_pairs)]
        # keep each pipe's order: re-sort the chosen positions per pipe
        by_pipe = {}
        for i in range(n_pairs):
            by_pipe.setdefault(per_core[r][i].pipe_id, []).append(i)
        queue = {p: list(v) for p, v in by_pipe.items()}
        out = []
        for i in order:
            out.append(per_core[r][queue[per_core[r][i].pipe_id].pop(0)])
        programs.append(out)
    lone = Tile(0, 1, 0, 1, 1)
    programs[0].append(SendRecv(lone, Tile(0, 1, B - 1, 1, 1), 1, 1, PIPES - 1, tag=200))
    return programs


def _run(seed, stall, n_pairs=15, broken=0.3):
    from amaranth.hdl import Module
    from amaranth.lib import wiring
    from amaranth.sim import Simulator

    from ncrtl.hdl.dma.sbuf import Sbuf, sim_load, sim_read

    rng = np.random.default_rng(seed)
    programs = _program(rng, n_pairs, broken)
    sbufs = [rng.integers(0, 256, (P, B), dtype=np.uint8) for _ in range(2)]
    want, codes, _ = exchange(programs, sbufs)

    m = Module()
    units = [Unit(W, partitions=P, partition_bytes=B, pipes=PIPES, depth=DEPTH) for _ in range(2)]
    sbs = [Sbuf(P, B, W) for _ in range(2)]
    from amaranth.hdl import Signal

    stall_bits = [Signal(name=f"stall{r}") for r in range(2)]
    for r in range(2):
        m.submodules[f"unit{r}"] = units[r]
        m.submodules[f"sbuf{r}"] = sbs[r]
        wiring.connect(m, units[r].sbuf_req, sbs[r].dma_req)
        wiring.connect(m, sbs[r].dma_resp, units[r].sbuf_resp)
        m.d.comb += units[r].rank.eq(r)
        a, b = units[r].tx, units[1 - r].rx  # the link r -> 1 - r, stalled now and then
        m.d.comb += [
            b.payload.eq(a.payload),
            b.valid.eq(a.valid & ~stall_bits[r]),
            a.ready.eq(b.ready & ~stall_bits[r]),
        ]
    got = [[], []]
    done = {"loaded": 0}
    expected = [sum(c is not PENDING for c in codes[r]) for r in (0, 1)]

    def feeder(r):
        async def run(ctx):
            await sim_load(ctx, sbs[r], sbufs[r])
            done["loaded"] += 1
            while done["loaded"] < 2:
                await ctx.tick()
            for op in programs[r]:
                ctx.set(units[r].op.payload, encode_sendrecv(op))
                ctx.set(units[r].op.valid, 1)
                await ctx.tick().until(units[r].op.ready)
                ctx.set(units[r].op.valid, 0)
                if stall and rng.random() < stall:
                    await ctx.tick()

        return run

    async def drain(ctx):
        cycle = 0
        while any(len(got[r]) < expected[r] for r in (0, 1)):
            assert cycle < 100_000, f"stopped: {got}"
            for r in (0, 1):
                ctx.set(stall_bits[r], int(rng.random() < stall))
                ctx.set(units[r].status.ready, int(rng.random() >= stall))
            await ctx.delay(1e-9)
            for r in (0, 1):
                if ctx.get(units[r].status.valid) and ctx.get(units[r].status.ready):
                    s = ctx.get(units[r].status.payload)
                    got[r].append((s.pipe, s.tag, s.code))
            await ctx.tick()
            cycle += 1
        for r in (0, 1):
            ctx.set(units[r].status.ready, 1)
            ctx.set(stall_bits[r], 0)
        for _ in range(200):  # the lone sendrecv stays pending
            await ctx.tick()
            for r in (0, 1):
                assert not ctx.get(units[r].status.valid), "a sendrecv without partner completed"
        for r in (0, 1):
            back = await sim_read(ctx, sbs[r])
            assert np.array_equal(back, want[r]), f"core {r}: SBUF differs from the golden"

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(feeder(0))
    sim.add_testbench(feeder(1))
    sim.add_testbench(drain)
    sim.run()
    for r in (0, 1):
        for pipe in range(PIPES):
            mine = [(t, c) for p, t, c in got[r] if p == pipe]
            gold = [
                (op.tag, int(c))
                for op, c in zip(programs[r], codes[r])
                if op.pipe_id == pipe and c is not PENDING
            ]
            assert mine == gold, f"core {r} pipe {pipe}"
    return codes


@pytest.mark.parametrize(
    ("seed", "stall"),
    [(0, 0.0), (1, 0.3), pytest.param(2, 0.5, marks=pytest.mark.slow)],
)
def test_two_cores_exchange_like_the_golden(seed, stall):
    """Two units linked as the two cores: random pairs on random pipes posted in different
    orders on the two cores, a third of them with a rule broken on one side, random stalls
    on the link, the statuses and the op streams; every completion (pipe, tag, code) in each
    pipe's order, both SBUFs bit for bit, and a sendrecv without a partner never completes
    while the others do."""
    codes = _run(seed, stall)
    seen = {c for cs in codes for c in cs if c is not PENDING}
    assert Code.NONE in seen and len(seen) >= 3, seen


def test_sendrecv_verilog_lint_clean():
    from ncrtl.hdl.verilog import convert
    from ncrtl.testbench.lint import lint_verilog

    lint_verilog(
        convert(Unit(W, partitions=P, partition_bytes=B, pipes=PIPES), "sendrecv"), "sendrecv"
    ).check()
