"""Amaranth-simulator tests of the NeuronCore's Vector Engine (``ncrtl.hdl.neuroncore.vector``)
on a model of its SBUF port: ``quantize_mx`` against the golden's
:func:`ncrtl.model.vector_engine.quantize_mx`, ``tensor_copy`` between the quantizations (the
port passes from unit to unit), refused operations, all under random stalls of the queue, the
SBUF's grants and its read responses."""

import sys

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


def run_vector(ops, contents, *, stall, seed):
    """The ops through a :class:`VectorEngine` at :data:`GEO` on an SBUF holding
    ``contents``; returns ``(sbuf bytes after, errors [(op index, code)], done count,
    cycles)``."""
    dut = VectorEngine(GEO)
    rng = np.random.default_rng(seed)
    mem = SbufMemory(GEO.partitions, GEO.partition_bytes, GEO.word_bytes)
    mem.data[:] = contents
    W, P = GEO.word_bytes, GEO.partitions
    words = [pack(op, GEO) >> 1 for op in ops]  # the queue word without its kind bit
    mask = (1 << vector_layout(GEO).size) - 1
    errors, state = [], {"done": 0, "cycles": 0}

    async def bench(ctx):
        q, sreq, sresp = dut.queue.op, dut.sbuf.req, dut.sbuf.resp
        ctx.set(dut.psum.req.ready, 0)
        ctx.set(dut.psum.resp.valid, 0)
        pos, taken = 0, 0
        response = None  # [cycles to wait, payload]
        for cycle in range(200 * (len(ops) + 4)):
            offer = pos < len(ops) and rng.random() >= stall
            ctx.set(q.valid, offer)
            if offer:
                ctx.set(q.payload.as_value(), words[pos] & mask)
            deliver = response is not None and response[0] == 0
            ctx.set(sresp.valid, deliver)
            if deliver:
                ctx.set(sresp.payload, response[1])
            await ctx.delay(1e-9)
            # one read response in flight: a read is granted once the last one is taken
            write = ctx.get(sreq.payload.write)
            grant = rng.random() >= stall and (write or response is None or deliver)
            ctx.set(sreq.ready, grant)
            await ctx.delay(1e-9)
            if deliver and ctx.get(sresp.ready):
                response = None
            elif response is not None and response[0] > 0:
                response[0] -= 1
            if ctx.get(sreq.valid) and grant:
                req = {k: ctx.get(getattr(sreq.payload, k)) for k in ("mask", "word", "write")}
                if write:
                    data, strobe = ctx.get(sreq.payload.data), ctx.get(sreq.payload.strobe)
                    for p in range(P):
                        if req["mask"] >> p & 1:
                            mem.write(
                                p, req["word"], (data >> (8 * W * p)) & ((1 << 8 * W) - 1), strobe
                            )
                else:
                    value = int.from_bytes(
                        mem.data[:, req["word"] * W : (req["word"] + 1) * W].tobytes(), "little"
                    )
                    response = [int(rng.integers(0, 3)) if stall else 0, value]
            if ctx.get(dut.error.valid):
                errors.append((taken, ctx.get(dut.error.code)))
            state["done"] += ctx.get(dut.queue.done)
            if offer and ctx.get(q.ready):
                pos += 1
                taken += 1
            await ctx.tick()
            if pos == len(ops) and state["done"] == len(ops):
                state["cycles"] = cycle + 1
                break

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return mem.data.copy(), errors, state["done"], state["cycles"]


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
    count that is not a multiple of 4) that write nothing and strobe their error: the SBUF
    afterwards is the golden's byte for byte, every operation completes once."""
    stall = 0.3
    rng = np.random.default_rng(7)
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
    want = SbufMemory(GEO.partitions, GEO.partition_bytes, GEO.word_bytes)
    want.data[:] = contents
    for op in good:
        apply(want, op)
    got, errors, done, _ = run_vector(ops, contents, stall=stall, seed=11)
    assert done == len(ops)
    q = VectorError.QUANTIZE << 2
    assert errors == [
        (2, q | QuantizeError.FORMAT),
        (5, q | QuantizeError.SHAPE),
        (6, q | QuantizeError.SHAPE),
    ]
    diff = np.argwhere(got != want.data)
    assert diff.size == 0, f"{len(diff)} bytes differ, first at (partition, byte) {diff[:4]}"


def test_quantize_streams_a_beat_per_cycle():
    """Without stalls a quantization of ``F`` elements per partition takes ``F / 4`` cycles
    and a few of latency: a beat per cycle while it reads, quantizes and writes on one port."""
    rng = np.random.default_rng(1)
    contents = np.zeros((GEO.partitions, GEO.partition_bytes), dtype=np.uint8)
    contents[:, :256] = source_bytes(rng, (GEO.partitions, 128))
    op = quantize(rng, 128, 0, 256, 384)
    _, errors, done, cycles = run_vector([op], contents, stall=0.0, seed=1)
    assert (errors, done) == ([], 1)
    assert 32 <= cycles <= 32 + 8, cycles


def test_quantize_needs_a_quantizer():
    """A v3 core's Vector Engine has no QuantizeMX: a ``quantize_mx`` is refused with its own
    code, writes nothing, and the engine goes on."""
    from dataclasses import replace

    global GEO
    saved = GEO
    GEO = replace(saved, version="v3")
    try:
        assert VectorEngine(GEO).quantize is None
        contents = np.random.default_rng(2).integers(0, 256, (32, 512), dtype=np.uint8)
        copy = CopyOp(False, 0, 256, 0, 32, 16, 2, 2, Convert.RAW)
        got, errors, done, _ = run_vector(
            [QuantizeOp(0, 256, 400, 0, 32, 16, 0, 0), copy], contents, stall=0.0, seed=3
        )
        want = SbufMemory(32, 512, 16)
        want.data[:] = contents
        apply(want, copy)
        assert done == 2
        assert errors == [(0, VectorError.NO_QUANTIZER << 2)]
        assert (got == want.data).all()
    finally:
        GEO = saved
