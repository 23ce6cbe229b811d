"""The SBUF with a DMA port per engine (``ncrtl.hdl.sbuf.memory.MultiPortSbuf``) against its
golden arbiter (:class:`ncrtl.model.sbuf.memory.PortsArbiter`) and memory, cycle for cycle."""

import numpy as np
import pytest

from ncrtl.testbench.dma.program import sbuf_engine_requests, sbuf_requests


@pytest.mark.long
@pytest.mark.parametrize(("ports", "seed"), [(3, 1), (4, 2)])
def test_multi_port_sbuf_cycle_for_cycle(ports, seed):
    """Every DMA port and the engine port with random requests (reads, writes, FP32 / BF16
    read-add-writes, often on one hot partition and the word just accessed), idle cycles and
    response backpressure: every grant as the golden arbiter decides it, every read returning
    the bytes the golden memory holds at its grant, nothing lost or duplicated; ports on
    different partitions served in the same cycle."""
    from amaranth.sim import Simulator

    from ncrtl.hdl.sbuf.memory import MultiPortSbuf
    from ncrtl.model.sbuf.memory import ADD_LATENCY, Access, PortsArbiter, SbufMemory

    parts, pbytes, wb, wait = 4, 64, 4, 3
    dut = MultiPortSbuf(ports, parts, pbytes, wb, dma_wait=wait)
    rng = np.random.default_rng(seed)
    words = pbytes // wb
    n = 250
    dq = [
        sbuf_requests(rng, parts, words, wb, n, again=0.2, hot=0.4, mix=(0.4, 0.3, 0.3))
        for _ in range(ports)
    ]
    eq = sbuf_engine_requests(rng, parts, words, wb, n // 4)
    arb, mem = PortsArbiter(ports, wait), SbufMemory(parts, pbytes, wb)
    stats = {"grants": 0, "together": 0, "adds": 0, "eng": 0}

    async def bench(ctx):
        di = [0] * ports
        ei = 0
        d_valid = [False] * ports
        d_resp = [None] * ports
        e_valid, e_resp = False, None
        sums = [[] for _ in range(ADD_LATENCY)]
        for _ in range(30 * n):
            if all(d >= n for d in di) and ei >= len(eq) and not any(d_valid) and not e_valid:
                break
            offer = [di[i] < n and rng.random() < 0.8 for i in range(ports)]
            rdy = [rng.random() < 0.7 for i in range(ports)]
            e_off = ei < len(eq) and rng.random() < 0.3
            e_rdy = rng.random() < 0.7
            for i in range(ports):
                if offer[i]:
                    ctx.set(dut.dma_req_port(i).payload, dq[i][di[i]])
                ctx.set(dut.dma_req_port(i).valid, offer[i])
                ctx.set(dut.dma_resp_port(i).ready, rdy[i])
            if e_off:
                ctx.set(dut.eng_req.payload, eq[ei])
            ctx.set(dut.eng_req.valid, e_off)
            ctx.set(dut.eng_resp.ready, e_rdy)
            await ctx.delay(1e-9)
            reqs = []
            for i in range(ports):
                if not offer[i]:
                    reqs.append(None)
                    continue
                r = dq[i][di[i]]
                blocked = r["access"] == Access.READ and d_valid[i] and not rdy[i]
                reqs.append((r["partition"], r["word"], r["access"], blocked))
            e = None
            if e_off:
                r = eq[ei]
                e = (
                    r["mask"],
                    r["word"],
                    bool(r["write"]),
                    not r["write"] and e_valid and not e_rdy,
                )
            want, want_e = arb.step(reqs, e)
            got = [bool(ctx.get(dut.dma_req_port(i).ready)) and offer[i] for i in range(ports)]
            assert got == want, (di, got, want)
            assert (bool(ctx.get(dut.eng_req.ready)) and e_off) == want_e
            for i in range(ports):
                assert bool(ctx.get(dut.dma_resp_port(i).valid)) == d_valid[i]
                if d_valid[i] and rdy[i]:
                    assert ctx.get(dut.dma_resp_port(i).payload) == d_resp[i], i
                    d_valid[i] = False
            if e_valid and e_rdy:
                word = ctx.get(dut.eng_resp.payload)
                mask, exp = e_resp
                for p in range(parts):
                    if (mask >> p) & 1:
                        assert (word >> (8 * wb * p)) & ((1 << 8 * wb) - 1) == exp[p]
                e_valid = False
            stats["grants"] += sum(want)
            stats["together"] += sum(want) > 1
            if want_e:
                r = eq[ei]
                for p in range(parts):
                    if (r["mask"] >> p) & 1 and r["write"]:
                        chunk = (r["data"] >> (8 * wb * p)) & ((1 << 8 * wb) - 1)
                        mem.write(p, r["word"], chunk, r["strobe"])
                if not r["write"]:
                    e_resp = (
                        r["mask"],
                        {
                            p: int.from_bytes(mem.read(p, r["word"]).tobytes(), "little")
                            for p in range(parts)
                        },
                    )
                    e_valid = True
                ei += 1
                stats["eng"] += 1
            added = []
            for i in range(ports):
                if not want[i]:
                    continue
                r = dq[i][di[i]]
                if r["access"] == Access.WRITE:
                    mem.write(r["partition"], r["word"], r["data"], r["strobe"])
                elif r["access"] == Access.ADD:
                    added.append(r)
                    stats["adds"] += 1
                else:
                    d_resp[i] = int.from_bytes(
                        mem.read(r["partition"], r["word"]).tobytes(), "little"
                    )
                    d_valid[i] = True
                di[i] += 1
            for r in sums[-1]:
                mem.add(r["partition"], r["word"], r["data"], r["strobe"], r["dtype"])
            sums = [added] + sums[:-1]
            await ctx.tick()
        assert di == [n] * ports and ei == len(eq)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert stats["grants"] == n * ports and stats["adds"] > n * ports // 5
    assert stats["together"] > n // 4


@pytest.mark.synth
def test_multi_port_sbuf_verilog_lint_clean():
    from ncrtl.hdl.sbuf.memory import MultiPortSbuf
    from ncrtl.hdl.verilog import convert
    from ncrtl.testbench.lint import lint_verilog

    top = "sbuf_ports"
    lint_verilog(convert(MultiPortSbuf(3, 4, 64, 4, instance=True), top), top).check()


@pytest.mark.parametrize("clients", [2, 3])
def test_engine_ports_shared_round_robin_with_stalls(clients):
    """An SBUF with a port per compute engine (``engine_ports``): every client's random reads
    and writes (random masks, strobes and words) with idle cycles and response backpressure;
    every write lands at its grant, every read returns the bytes the memory holds at its grant
    to the client that asked, in its order, nothing lost or duplicated; while every client
    asks, the grants go round robin."""
    from amaranth.sim import Simulator

    from ncrtl.hdl.sbuf.memory import MultiPortSbuf
    from ncrtl.model.sbuf.memory import SbufMemory

    parts, pbytes, wb = 4, 64, 4
    dut = MultiPortSbuf(2, parts, pbytes, wb, engine_ports=clients)
    rng = np.random.default_rng(clients)
    words, n = pbytes // wb, 60
    todo = [sbuf_engine_requests(rng, parts, words, wb, n) for _ in range(clients)]
    mem = SbufMemory(parts, pbytes, wb)
    want = [[] for _ in range(clients)]  # each client's reads, as the memory is at the grant
    got = [[] for _ in range(clients)]
    turns = []  # (granted, the one after the last granted) while every client asked

    def apply(q):
        if q["write"]:
            for p in range(parts):
                if q["mask"] >> p & 1:
                    word = (q["data"] >> (8 * wb * p)) & ((1 << 8 * wb) - 1)
                    mem.write(p, q["word"], word, q["strobe"])
            return None
        return [bytes(mem.read(p, q["word"])) if q["mask"] >> p & 1 else None for p in range(parts)]

    async def bench(ctx):
        pos = [0] * clients
        last = None
        for _ in range(40 * n):
            if all(p >= n for p in pos) and len(sum(got, [])) == len(sum(want, [])):
                break
            offer = [pos[j] < n and rng.random() < 0.8 for j in range(clients)]
            ready = [rng.random() < 0.6 for j in range(clients)]
            for j in range(clients):
                port = dut.engine_port(j)
                if offer[j]:
                    ctx.set(port.req.payload, todo[j][pos[j]])
                ctx.set(port.req.valid, offer[j])
                ctx.set(port.resp.ready, ready[j])
            for i in range(2):
                ctx.set(dut.dma_req_port(i).valid, 0)
            await ctx.delay(1e-9)
            granted = [
                j for j in range(clients) if offer[j] and ctx.get(dut.engine_port(j).req.ready)
            ]
            assert len(granted) <= 1
            for j in range(clients):
                port = dut.engine_port(j)
                if ctx.get(port.resp.valid) and ready[j]:
                    got[j].append(ctx.get(port.resp.payload))
            if granted:
                j = granted[0]
                if all(offer) and last is not None:
                    turns.append((j, (last + 1) % clients))
                last = j
                read = apply(todo[j][pos[j]])
                if read is not None:
                    want[j].append(read)
                pos[j] += 1
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    mask = (1 << 8 * wb) - 1
    for j in range(clients):
        assert len(got[j]) == len(want[j]) > 5
        for value, expect in zip(got[j], want[j]):
            for p, word in enumerate(expect):
                if word is not None:
                    assert (value >> (8 * wb * p)) & mask == int.from_bytes(word, "little")
    assert len(turns) > 10 and all(j == after for j, after in turns)


@pytest.mark.synth  # its Verilog is linted
@pytest.mark.parametrize(("items", "index_bits"), [(1, 2), (3, 2), (5, 4), (8, 3), (16, 5)])
def test_pick_and_decode_select_and_give_zero_past_the_end(items, index_bits):
    """The SBUF's selects (``ncrtl.hdl.common.bits``): ``pick`` gives item ``index`` and zero
    for every index past the end, ``decode`` bit ``index`` of ``n`` (none past the end), for
    every index the port can hold; the Verilog is lint-clean."""
    from amaranth.hdl import Module
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out
    from amaranth.sim import Simulator

    from ncrtl.hdl.common.bits import decode, pick
    from ncrtl.hdl.verilog import convert
    from ncrtl.testbench.lint import lint_verilog

    width = 6

    class Top(wiring.Component):
        def __init__(self):
            super().__init__(
                {"data": In(width * items), "index": In(index_bits), "item": Out(width)}
                | {"onehot": Out(items)}
            )

        def elaborate(self, platform):
            m = Module()
            parts = [self.data[width * i : width * (i + 1)] for i in range(items)]
            m.d.comb += [
                self.item.eq(pick(parts, self.index)),
                self.onehot.eq(decode(self.index, items)),
            ]
            return m

    rng = np.random.default_rng(items)
    values = [int(v) for v in rng.integers(1, 1 << width, items)]
    dut = Top()

    async def bench(ctx):
        ctx.set(dut.data, sum(v << (width * i) for i, v in enumerate(values)))
        for i in range(1 << index_bits):
            ctx.set(dut.index, i)
            await ctx.delay(1e-9)
            assert ctx.get(dut.item) == (values[i] if i < items else 0), i
            assert ctx.get(dut.onehot) == ((1 << i) if i < items else 0), i

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    text = convert(Top(), "pick_top")
    lint_verilog(text, "pick_top").check()
