"""The RTL NeuronCore (docs/neuroncore.md): a kernel's streams as queue entries, its refusals,
and kernels run on the core in the Amaranth simulator against the golden, bit for bit."""

import os

import ml_dtypes
import numpy as np
import pytest

import ncrtl.nki as nki
from ncrtl.hdl.neuroncore.isa import op_layouts, pack, queue_layout
from ncrtl.kernels import load, load_file
from ncrtl.model.kernel import golden
from ncrtl.model.neuroncore import CopyOp, DmaOp, Geometry, MatmulOp, Unsupported, Wait, encode
from ncrtl.nki.kernel import trace
from ncrtl.testbench.neuroncore.pysim import run_core

HERE = os.path.dirname(__file__)
RTL = os.path.join(HERE, "kernels", "rtl.py")

#: The smallest core the tests build: 8 partitions, an 8 x 8 Tensor Engine, 2 DMA engines.
SMALL = Geometry(
    partitions=8,
    rows=8,
    cols=8,
    partition_bytes=1024,
    dma_engines=2,
    dma_queues=4,
    hbm_bytes=1 << 12,
    tile_unit=2,
    psum_banks=2,
    psum_bank_bytes=128,
)


def _bf16(rng, *shape):
    return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)


def _line(tag):
    with open(RTL) as f:
        for i, line in enumerate(f, 1):
            if f"# LINE {tag}" in line:
                return f"{RTL}:{i}"
    raise AssertionError(tag)


def _same_bits(a, b):
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_matmul_streams_become_queue_entries():
    rng = np.random.default_rng(0)
    a, b = _bf16(rng, 8, 6), _bf16(rng, 8, 16)
    prog = trace(load("matmul_basic")[1], [a, b], core=SMALL.core())
    enc = encode(prog, SMALL)
    assert set(enc.queues) == set(SMALL.streams())
    t = enc.queues["tensor"]
    # the matmul waits for both loads (dma0, dma1: semaphores 2 and 3), then runs
    assert t[:2] == [Wait(2, 1), Wait(3, 1)] and isinstance(t[2], MatmulOp)
    assert (t[2].s_esize, t[2].m_esize) == (2, 2)
    v = enc.queues["vector"]
    assert v[0] == Wait(0, 1) and isinstance(v[1], CopyOp)
    assert (v[1].src_psum, v[1].parts, v[1].n, v[1].convert) == (True, 6, 16, 1)
    d = enc.queues["dma0"][0]
    assert isinstance(d, DmaOp) and d.parts == SMALL.dma_engines
    assert enc.totals == {"tensor": 1, "vector": 1, "dma0": 1, "dma1": 1, "dma2": 1, "dma3": 0}
    # every entry packs into its queue's word, each field where the hardware reads it
    layouts = op_layouts(SMALL)
    for name, entries in enc.queues.items():
        layout = queue_layout(layouts[name])
        for e in entries:
            bits = pack(e, SMALL)
            assert 0 <= bits < 1 << layout.size
            word = layout.from_bits(bits)
            assert word.kind == (0 if isinstance(e, Wait) else 1)
            if isinstance(e, Wait):
                assert (word.body.wait.sem, word.body.wait.count) == (e.sem, e.count)
                continue
            op = word.body.op
            if isinstance(e, MatmulOp):
                got = (op.ls.as_bits(), op.mm.as_bits(), op.psum.as_bits(), op.s_addr, op.m_addr)
                assert got == (e.ls, e.mm, e.psum, e.s_addr, e.m_addr)
                assert (1 << op.s_esize, 1 << op.m_esize) == (e.s_esize, e.m_esize)
            elif isinstance(e, CopyOp):
                got = (op.src_psum, op.src_addr, op.dst_addr, op.part, op.parts, op.n, op.convert)
                assert got == (e.src_psum, e.src_addr, e.dst_addr, e.part, e.parts, e.n, e.convert)
                assert (1 << op.src_esize, 1 << op.dst_esize) == (e.src_esize, e.dst_esize)
            else:
                assert op.parts == e.parts
                assert (op.desc.src.base, op.desc.dst.base) == (e.desc.src.base, e.desc.dst.base)


def test_an_instruction_the_core_lacks_is_refused_naming_it():
    k = load_file(RTL, "uses_activation")
    x = np.ones((8, 4), np.float32)
    prog = trace(k, [x], core=SMALL.core())
    with pytest.raises(Unsupported) as e:
        encode(prog, SMALL)
    msg = str(e.value)
    assert _line("activation") in msg and "activation" in msg and "no scalar stream" in msg


def test_a_kernel_traced_for_another_geometry_is_refused():
    rng = np.random.default_rng(0)
    prog = trace(load("matmul_basic")[1], [_bf16(rng, 128, 8), _bf16(rng, 128, 16)])
    with pytest.raises(Unsupported, match="partitions = 128, the RTL core has 8"):
        encode(prog, SMALL)


def test_geometry_rules():
    with pytest.raises(ValueError, match="cols .* must equal partitions"):
        Geometry(partitions=8, rows=8, cols=4)
    with pytest.raises(ValueError, match="dma_queues x dma_inflight"):
        Geometry(dma_queues=32, dma_inflight=4)


def test_tile_sizes_follow_the_traced_core():
    seen = {}

    @nki.jit
    def probe(x):
        import nki.language as nl

        seen["pmax"] = nl.tile_size.pmax
        seen["fmax"] = nl.tile_size.gemm_moving_fmax
        return x

    trace(probe, [np.zeros((8, 4), np.float32)], core=SMALL.core())
    assert seen == {"pmax": 8, "fmax": 32}
    import ncrtl.nki.language as nl

    assert nl.tile_size.pmax == 128 and nl.tile_size.gemm_moving_fmax == 512


@pytest.mark.long
def test_matmul_runs_bit_exact_on_the_core_with_memory_stalls():
    """DMA loads, the matmul through the Tensor Engine into PSUM, the eviction with BF16
    rounding, the DMA store: the device memory's output equals the golden's bit for bit, with
    a fifth of the AXI4 and queue cycles stalled."""
    rng = np.random.default_rng(1)
    a, b = _bf16(rng, 8, 6), _bf16(rng, 8, 16)
    prog = trace(load("matmul_basic")[1], [a, b], core=SMALL.core())
    want, _ = golden.run(prog, [a, b])
    got = run_core(prog, [a, b], SMALL, stall=0.2, seed=3)
    assert _same_bits(got.outputs[0], want[0])


@pytest.mark.long
def test_evictions_convert_as_the_golden():
    """FP32 -> BF16 and FP16 (round to nearest even, with ties, overflow, subnormals and NaN)
    and an FP32 copy, SBUF -> SBUF."""
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((8, 12)) * 2.0 ** rng.integers(-30, 20, (8, 12))).astype(np.float32)
    x.reshape(-1)[:6] = [np.nan, np.inf, -np.inf, 1e38, 65520.0, 1 + 2.0**-8]
    prog = trace(load_file(RTL, "evictions"), [x], core=SMALL.core())
    want, _ = golden.run(prog, [x])
    got = run_core(prog, [x], SMALL)
    for g, w in zip(got.outputs, want):
        assert _same_bits(g, w)
