"""Amaranth-simulator tests of the NeuronCore's Vector Engine (``ncrtl.hdl.neuroncore.vector``)
on a model of its SBUF port: ``quantize_mx`` against the golden's
:func:`ncrtl.model.vector_engine.quantize_mx`, ``tensor_copy`` between the quantizations (the
port passes from unit to unit), refused operations, all under random stalls of the queue, the
SBUF's grants and its read responses."""

import sys
from dataclasses import replace

import numpy as np
import pytest
from amaranth.sim import Simulator

from ncrtl.hdl.neuroncore.isa import pack, vector_layout
from ncrtl.hdl.neuroncore.quantize import QuantizeError
from ncrtl.hdl.neuroncore.vector import VectorEngine, VectorError
from ncrtl.model.fp import get_format
from ncrtl.model.neuroncore.isa import (
    QUANTIZE_FORMATS,
    QUANTIZE_SOURCES,
    Convert,
    CopyOp,
    Geometry,
    QuantizeOp,
)
from ncrtl.model.sbuf.memory import SbufMemory
from ncrtl.model.vector_engine import quantize_mx

#: 32 partitions (one quadrant, four groups) of 512 bytes.
GEO = Geometry(
    partitions=32,
    partition_bytes=512,
    rows=8,
    cols=32,
    psum_banks=2,
    psum_bank_bytes=128,
    dma_engines=2,
    dma_queues=4,
    hbm_bytes=16384,
    tile_unit=8,
    version="v4",
)

# The simulator compiles a memory of 4,096-bit words (the units' SBUF word FIFOs at 32
# partitions) into an expression nested deeper than Python's default limit allows.
sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))

# Casting signalling NaNs to float64 in the golden warns; the values are right.
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


def apply(mem, op):
    """``op`` on the SBUF model as the golden does it."""
    part = slice(op.part, op.part + op.parts)
    if isinstance(op, CopyOp):
        src = mem.data[part, op.src_addr : op.src_addr + op.n * op.src_esize].copy()
        mem.data[part, op.dst_addr : op.dst_addr + op.n * op.dst_esize] = src
        return
    fmt = {v: k for k, v in QUANTIZE_SOURCES.items()}[op.src_fmt]
    dtype = get_format({"bfloat16": "bf16", "float16": "fp16"}[fmt]).dtype
    src = mem.data[part, op.src_addr : op.src_addr + 2 * op.n].copy().view(dtype)
    elem = {v: k for k, v in QUANTIZE_FORMATS.items()}[op.elem_fmt].removesuffix("_x4")
    data, scales = quantize_mx(src, elem.replace("float8", "fp8"))
    codes = np.ascontiguousarray(data).view(np.uint8).reshape(op.parts, op.n)
    mem.data[part, op.dst_addr : op.dst_addr + op.n] = codes
    mem.data[part, op.scale_addr : op.scale_addr + op.n // 4] = scales


def source_bytes(rng, shape):
    """BF16 / FP16 bit patterns: most in a few binades (their codes span the formats), some of
    every exponent (infinities and NaN among them)."""
    near = rng.standard_normal(shape) * 2.0 ** rng.integers(-6, 6, shape)
    bits = near.astype(np.float32).view(np.uint32) >> 16
    wild = rng.integers(0, 1 << 16, shape)
    pick = rng.random(shape) < 0.2
    return np.where(pick, wild, bits).astype(np.uint16).view(np.uint8).reshape(shape[0], -1)


class SbufPortModel:
    """An engine's SBUF port (:class:`~ncrtl.hdl.sbuf.memory.SbufPort`) on the SBUF model
    ``mem``: requests granted with probability ``1 - stall``, a read only once the last read's
    response is taken (one in flight, as the SBUF's engine ports), its response 1 to 3 cycles
    after the grant (1 without stalls), writes applied at the grant with their strobes."""

    def __init__(self, port, mem, rng, stall):
        self.port, self.mem, self.rng, self.stall = port, mem, rng, stall
        self.response = None  # [cycles still to wait, payload]
        self.deliver = False

    def offer(self, ctx):
        """Before the cycle's logic settles: the response due this cycle."""
        self.deliver = self.response is not None and self.response[0] == 0
        ctx.set(self.port.resp.valid, self.deliver)
        if self.deliver:
            ctx.set(self.port.resp.payload, self.response[1])

    async def serve(self, ctx):
        """Once the engine's request has settled: the grant, and what it does."""
        req, mem = self.port.req, self.mem
        W, P = mem.word_bytes, mem.data.shape[0]
        write = ctx.get(req.payload.write)
        grant = self.rng.random() >= self.stall and (write or self.response is None or self.deliver)
        ctx.set(req.ready, grant)
        await ctx.delay(1e-9)
        if self.deliver and ctx.get(self.port.resp.ready):
            self.response = None
        elif self.response is not None and self.response[0] > 0:
            self.response[0] -= 1
        if ctx.get(req.valid) and grant:
            mask, word = ctx.get(req.payload.mask), ctx.get(req.payload.word)
            if write:
                data, strobe = ctx.get(req.payload.data), ctx.get(req.payload.strobe)
                for p in range(P):
                    if mask >> p & 1:
                        mem.write(p, word, (data >> (8 * W * p)) & ((1 << 8 * W) - 1), strobe)
            else:
                value = int.from_bytes(mem.data[:, word * W : (word + 1) * W].tobytes(), "little")
                delay = int(self.rng.integers(0, 3)) if self.stall else 0
                self.response = [delay, value]


def run_vector(phases, *, seed, geo=None):
    """Operations through one :class:`VectorEngine` (at :data:`GEO` unless ``geo``), phase
    after phase: each ``(ops, contents, stall)`` on an SBUF holding ``contents``, its queue and
    SBUF port stalled with probability ``stall``; returns per phase ``(sbuf bytes after, errors
    [(op index, code)], done count, cycles)``."""
    geo = geo or GEO
    dut = VectorEngine(geo)
    rng = np.random.default_rng(seed)
    mask = (1 << vector_layout(geo).size) - 1
    results = []

    async def bench(ctx):
        q = dut.queue.op
        ctx.set(dut.psum.req.ready, 0)
        ctx.set(dut.psum.resp.valid, 0)
        for ops, contents, stall in phases:
            mem = SbufMemory(geo.partitions, geo.partition_bytes, geo.word_bytes)
            mem.data[:] = contents
            sbuf = SbufPortModel(dut.sbuf, mem, rng, stall)
            words = [pack(op, geo) >> 1 for op in ops]  # the queue word without its kind bit
            pos, done, errors, cycles = 0, 0, [], 0
            for cycle in range(200 * (len(ops) + 4)):
                offer = pos < len(ops) and rng.random() >= stall
                ctx.set(q.valid, offer)
                if offer:
                    ctx.set(q.payload.as_value(), words[pos] & mask)
                sbuf.offer(ctx)
                await ctx.delay(1e-9)
                await sbuf.serve(ctx)
                if ctx.get(dut.error.valid):
                    errors.append((pos, ctx.get(dut.error.code)))
                done += ctx.get(dut.queue.done)
                if offer and ctx.get(q.ready):
                    pos += 1
                await ctx.tick()
                if pos == len(ops) and done == len(ops):
                    cycles = cycle + 1
                    break
            ctx.set(q.valid, 0)
            ctx.set(dut.sbuf.resp.valid, 0)
            await ctx.tick()
            results.append((mem.data.copy(), errors, done, cycles))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return results


def quantize(rng, n, src_addr, dst_addr, scale_addr, part=0, parts=32):
    return QuantizeOp(
        src_addr,
        dst_addr,
        scale_addr,
        part,
        parts,
        n,
        int(rng.integers(0, 2)),
        int(rng.integers(0, len(QUANTIZE_FORMATS))),
    )


def test_quantize_and_copy_on_the_sbuf_with_stalls():
    """Quantizations of every source and element format at word-aligned and half-word source
    addresses and unaligned destinations (codes and scales sharing words with other data,
    which must keep their bytes), an SBUF -> SBUF copy between them, and three refused
    operations (an FP4 element format, a partition range that is not a quadrant, an element
    count that is not a multiple of 4) that write nothing and strobe their error, with stalls:
    the SBUF afterwards is the golden's byte for byte, every operation completes once.  Before
    them, without stalls, a quantization of ``F`` elements per partition takes ``F / 4``
    cycles and a few of latency: a beat per cycle while it reads, quantizes and writes on one
    port."""
    rng = np.random.default_rng(7)
    # without stalls: the rate
    first = np.zeros((GEO.partitions, GEO.partition_bytes), dtype=np.uint8)
    first[:, :256] = source_bytes(rng, (GEO.partitions, 128))
    alone = quantize(rng, 128, 0, 256, 384)
    # with stalls: the values
    contents = rng.integers(0, 256, (GEO.partitions, GEO.partition_bytes), dtype=np.uint8)
    contents[:, :192] = source_bytes(rng, (GEO.partitions, 96))
    good = [
        quantize(rng, 32, 0, 256, 400),
        quantize(rng, 4, 8, 292, 417),
        CopyOp(False, 64, 320, 0, 32, 24, 2, 2, Convert.RAW),
        quantize(rng, 44, 104, 372, 430),
        quantize(rng, 12, 16, 440, 511 - 2),
    ]
    bad = [
        QuantizeOp(0, 256, 400, 0, 32, 16, 0, 2),  # fp4_e2m1fn
        QuantizeOp(0, 256, 400, 8, 24, 16, 0, 0),  # not a quadrant
        QuantizeOp(0, 256, 400, 0, 32, 18, 0, 0),  # 18 elements
    ]
    ops = good[:2] + bad[:1] + good[2:4] + bad[1:] + good[4:]
    (rate, run) = run_vector([([alone], first, 0.0), (ops, contents, 0.3)], seed=11)

    want = SbufMemory(GEO.partitions, GEO.partition_bytes, GEO.word_bytes)
    want.data[:] = first
    apply(want, alone)
    got, errors, done, cycles = rate
    assert (errors, done) == ([], 1) and (got == want.data).all()
    assert 32 <= cycles <= 32 + 8, cycles

    want.data[:] = contents
    for op in good:
        apply(want, op)
    got, errors, done, _ = run
    assert done == len(ops)
    q = VectorError.QUANTIZE << 2
    assert errors == [
        (2, q | QuantizeError.FORMAT),
        (5, q | QuantizeError.SHAPE),
        (6, q | QuantizeError.SHAPE),
    ]
    diff = np.argwhere(got != want.data)
    assert diff.size == 0, f"{len(diff)} bytes differ, first at (partition, byte) {diff[:4]}"


def test_quantize_needs_a_quantizer():
    """A v3 core's Vector Engine has no QuantizeMX: a ``quantize_mx`` is refused with its own
    code, writes nothing, and the engine goes on."""
    v3 = replace(GEO, version="v3")
    assert VectorEngine(v3).quantize is None
    contents = np.random.default_rng(2).integers(0, 256, (32, 512), dtype=np.uint8)
    copy = CopyOp(False, 0, 256, 0, 32, 16, 2, 2, Convert.RAW)
    ops = [QuantizeOp(0, 256, 400, 0, 32, 16, 0, 0), copy]
    ((got, errors, done, _),) = run_vector([(ops, contents, 0.0)], seed=3, geo=v3)
    want = SbufMemory(32, 512, 16)
    want.data[:] = contents
    apply(want, copy)
    assert done == 2
    assert errors == [(0, VectorError.NO_QUANTIZER << 2)]
    assert (got == want.data).all()


def run_feed(dut, geo, op, mem, rng, n_beats):
    """One matmul ``op`` through the feed ``dut`` on the SBUF model ``mem``, its SBUF port
    and output streams stalled at random: ``(instruction words, stationary beats as lists of
    40-bit lane words, moving beats the same)``."""
    from ncrtl.model.tensor_engine.timing import chain_count

    sbuf = SbufPortModel(dut.sbuf, mem, rng, 0.3)
    words = pack(op, geo) >> 1
    got = {"instr": [], "stationary": [], "moving": []}

    async def bench(ctx):
        op_port = dut.queue.op.payload.as_value()
        ctx.set(op_port, words & ((1 << len(op_port)) - 1))
        ctx.set(dut.queue.op.valid, 1)
        ctx.set(dut.psum_done, 0)
        for _ in range(3000):
            ready = {
                k: rng.random() >= 0.3 for k in ("te_instr", "stationary", "moving", "psum_instr")
            }
            for k, v in ready.items():
                ctx.set(getattr(dut, k).ready, v)
            sbuf.offer(ctx)
            await ctx.delay(1e-9)
            await sbuf.serve(ctx)
            taken = ctx.get(dut.queue.op.ready)
            for k, key in (
                ("te_instr", "instr"),
                ("stationary", "stationary"),
                ("moving", "moving"),
            ):
                port = getattr(dut, k)
                if ctx.get(port.valid) and ready[k]:
                    v = ctx.get(port.payload)
                    got[key].append(v.as_value().value if hasattr(v, "as_value") else v)
            await ctx.tick()
            if taken:
                ctx.set(dut.queue.op.valid, 0)
            if len(got["moving"]) == n_beats:
                break

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    mask40 = (1 << 40) - 1
    lanes = chain_count(geo.cols, geo.tile_unit) * geo.rows
    s_beats = [[(b >> (40 * i)) & mask40 for i in range(lanes)] for b in got["stationary"]]
    m_beats = [[(b >> (40 * r)) & mask40 for r in range(geo.rows)] for b in got["moving"]]
    return got["instr"], s_beats, m_beats


def _byte_lanes(mem, count, rows, first, second, width, row2=lambda r: r, shift=8):
    """``[count, rows]`` lane words: ``width`` bytes of row r's element x at ``first``, and a
    byte at ``second + x`` of partition ``row2(r)`` at bit ``shift``."""
    out = np.zeros((count, rows), dtype=np.uint64)
    for r in range(rows):
        for x in range(count):
            at = first + width * x
            value = int.from_bytes(mem.data[r, at : at + width].tobytes(), "little")
            out[x, r] = value | int(mem.data[row2(r), second + x]) << shift
    return out


def test_mx_feed_beats():
    """The Tensor Engine's feed (``TensorFeed(mx=True)``) on an MX matmul, on a model of its
    SBUF port with stalls and stalled streams: the LoadStationary and MultiplyMoving words in
    order, every stationary and moving lane word the ``_x4`` element of its row and column
    with, in bits ``[32, 40)``, the E8M0 byte of its row's scale partition (``32 (r // 32) +
    (r % 32) // 8``) at its column, from byte addresses that are not word-aligned."""
    from ncrtl.hdl.neuroncore.tensor import TensorFeed
    from ncrtl.hdl.tensor_engine.top import stationary_beats
    from ncrtl.model.fp import from_bits
    from ncrtl.model.neuroncore.isa import MatmulOp, Second
    from ncrtl.model.tensor_engine import isa as te_isa
    from ncrtl.model.tensor_engine.matmul import mx_instructions, mx_scale_partition

    geo = replace(GEO, rows=32)
    K, M, N = 32, 20, 24
    e4m3 = get_format("fp8_e4m3fn")
    ls, mm = mx_instructions(
        from_bits(np.zeros((K, M, 4), np.uint8), e4m3),
        from_bits(np.zeros((K, N, 4), np.uint8), e4m3),
        rows=geo.rows,
        cols=geo.cols,
        tile_unit=geo.tile_unit,
    )
    op = MatmulOp(
        te_isa.encode(ls), te_isa.encode(mm), 0, 52, 200, 4, 4, Second.MX_SCALES, 301, 407
    )
    rng = np.random.default_rng(4)
    mem = SbufMemory(geo.partitions, geo.partition_bytes, geo.word_bytes)
    mem.data[:] = rng.integers(0, 256, mem.data.shape, dtype=np.uint8)
    sp = lambda r: int(mx_scale_partition(r))  # noqa: E731
    want_s = _byte_lanes(mem, M, K, 52, 301, 4, sp, 32)
    want_s = stationary_beats(want_s, ls, geo.rows, geo.cols, geo.tile_unit)
    want_m = _byte_lanes(mem, N, K, 200, 407, 4, sp, 32)
    instr, s_beats, m_beats = run_feed(TensorFeed(geo, mx=True), geo, op, mem, rng, N)
    assert instr == [op.ls, op.mm]
    assert s_beats == want_s.tolist()
    assert m_beats == want_m.tolist()


def test_double_row_feed_beats():
    """The feed (``TensorFeed(double_row=True)``) on a double-row FP8 matmul of the small core
    (``[K, 2, M]`` / ``[K, 2, N]``: a partition's two rows one after the other), stalled as
    above: every lane word has the first row's byte in bits ``[0, 8)`` and the second row's in
    ``[8, 16)``, from unaligned addresses."""
    from ncrtl.hdl.neuroncore.tensor import TensorFeed
    from ncrtl.hdl.tensor_engine.top import stationary_beats
    from ncrtl.model.fp import from_bits
    from ncrtl.model.neuroncore.isa import MatmulOp, Second
    from ncrtl.model.tensor_engine import isa as te_isa
    from ncrtl.model.tensor_engine.matmul import instructions

    geo = replace(GEO, partitions=8, rows=8, cols=8, tile_unit=2, version="v3")
    K, M, N = 8, 7, 29
    e4m3 = get_format("fp8_e4m3")
    ls, mm = instructions(
        from_bits(np.zeros((K, 2, M), np.uint8), e4m3),
        from_bits(np.zeros((K, 2, N), np.uint8), e4m3),
        perf_mode="double_row",
        rows=geo.rows,
        cols=geo.cols,
        tile_unit=geo.tile_unit,
    )
    s0, m0 = 37, 141
    op = MatmulOp(
        te_isa.encode(ls), te_isa.encode(mm), 0, s0, m0, 1, 1, Second.DOUBLE_ROW, s0 + M, m0 + N
    )
    rng = np.random.default_rng(6)
    mem = SbufMemory(geo.partitions, geo.partition_bytes, geo.word_bytes)
    mem.data[:] = rng.integers(0, 256, mem.data.shape, dtype=np.uint8)
    want_s = _byte_lanes(mem, M, K, s0, s0 + M, 1)
    want_s = stationary_beats(want_s, ls, geo.rows, geo.cols, geo.tile_unit)
    want_m = _byte_lanes(mem, N, K, m0, m0 + N, 1)
    instr, s_beats, m_beats = run_feed(TensorFeed(geo, double_row=True), geo, op, mem, rng, N)
    assert instr == [op.ls, op.mm]
    assert s_beats == want_s.tolist()
    assert m_beats == want_m.tolist()


def test_instruction_fetch_streams_every_queue_in_order():
    """``InstrFetch`` on the small core's streams: queue words of random bits laid out as
    :func:`~ncrtl.hdl.neuroncore.isa.program_image` lays them (each in its power-of-two words,
    the streams one after another), a start per stream, the memory and the queues
    stalled at random: every queue gets its words in order, none lost or repeated; every read
    is one entry's burst at an address aligned to its size; a start for a stream the core lacks
    strobes the error and changes nothing."""
    from ncrtl.hdl.common.axi import sim_memory
    from ncrtl.hdl.neuroncore.fetch import FetchError, InstrFetch, start_layout
    from ncrtl.hdl.neuroncore.isa import entry_words, op_layouts, queue_layout

    geo = replace(GEO, partitions=8, cols=8, rows=8, tile_unit=2, version="v3")
    layouts = op_layouts(geo)
    dut = InstrFetch(geo, layouts, depth=2, outstanding=4)
    rng = np.random.default_rng(5)
    memory = np.zeros(geo.hbm_bytes, np.uint8)
    want, starts, addr = {}, [], 1024
    for i, (s, count) in enumerate((("tensor", 7), ("vector", 0), ("dma0", 5), ("dma3", 9))):
        bits = queue_layout(layouts[s]).size
        size = entry_words(layouts[s], geo) * geo.word_bytes
        addr = -(-addr // size) * size
        want[s] = [
            int.from_bytes(rng.bytes(-(-bits // 8)), "little") % (1 << bits) for _ in range(count)
        ]
        for k, w in enumerate(want[s]):
            memory[addr + k * size : addr + (k + 1) * size] = np.frombuffer(
                w.to_bytes(size, "little"), np.uint8
            )
        if count:
            starts.append((geo.streams().index(s), addr, count))
        addr += count * size
    starts.insert(2, (31, 0, 5))  # no such stream
    got = {s: [] for s in geo.streams()}
    errors, log = [], []
    layout = start_layout(geo)
    read, _ = sim_memory(dut.axi, memory, geo.word_bytes, latency=5, stall=0.3, rng=rng, log=log)

    async def bench(ctx):
        pos = 0
        for _ in range(2000):
            offer = pos < len(starts) and rng.random() >= 0.3
            ctx.set(dut.start.valid, offer)
            if offer:
                s, a, n = starts[pos]
                ctx.set(dut.start.payload, layout.const({"stream": s, "addr": a, "entries": n}))
            ready = {s: rng.random() >= 0.3 for s in geo.streams()}
            for s, r in ready.items():
                ctx.set(dut.queue(s).ready, r)
            await ctx.delay(1e-9)
            if ctx.get(dut.error.valid):
                errors.append((pos, ctx.get(dut.error.code)))
            for s in geo.streams():
                q = dut.queue(s)
                if ready[s] and ctx.get(q.valid):
                    got[s].append(ctx.get(q.payload.as_value()))
            if offer and ctx.get(dut.start.ready):
                pos += 1
            await ctx.tick()
            if all(len(got[s]) == len(w) for s, w in want.items()) and pos == len(starts):
                break

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.add_testbench(read, background=True)
    sim.run()
    for s in geo.streams():
        assert got[s] == want.get(s, []), s
    assert errors == [(2, FetchError.STREAM)]
    for _, a, n in log:
        assert a % ((n + 1) * geo.word_bytes) == 0 and n + 1 in (1, 2, 4, 8)
