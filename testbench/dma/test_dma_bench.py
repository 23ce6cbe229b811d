"""cocotb run behind ``ncrtl bench --only dma``: one descriptor per kind of transfer and size
on :class:`ncrtl.hdl.dma.top.DmaSystem`, no stalls, the memory model at full bandwidth; the
cycles from each descriptor to its completion go to the summary (each completion is also
checked against the golden's status, and its cycles against the timing model,
:func:`ncrtl.model.dma.timing.transfer_cycles`, exactly: scoreboard ``dma.timing``)."""

import cocotb
import numpy as np

from ncrtl.model.dma import Geometry, Memories, execute
from ncrtl.model.dma.timing import EngineTiming, transfer_cycles
from ncrtl.testbench.conformance import tb_settings
from ncrtl.testbench.dma.test_dma import DmaTB
from ncrtl.testbench.scoreboard import Scoreboard, write_counters

#: Bytes per partition the bandwidth test moves (those that fit the SBUF's partitions).
BENCH_SIZES = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
#: Kinds of transfer it measures (see :func:`bench_descriptors`).
BENCH_KINDS = ("copy", "transpose", "add")


def bench_descriptors(geo, size, kind, esize=4):
    """One descriptor of ``kind`` moving ``size`` bytes into each of the SBUF's partitions:
    ``copy`` (device memory -> SBUF), ``transpose`` (device memory [size / esize, P] ->
    SBUF [P, size / esize]), ``add`` (device memory += into the SBUF, FP32)."""
    from ncrtl.model.dma import AddDtype, Descriptor, Op, Side, Space

    parts = geo.partitions
    n = size // esize
    dst = Side(Space.SBUF, 0, n, parts * n, [(n, parts), (1, n)], esize)
    if kind == "copy":
        return Descriptor(
            Op.COPY, Side(Space.HBM, 0, n, parts * n, [(n, parts), (1, n)], esize), dst
        )
    if kind == "add":
        src = Side(Space.HBM, 0, n, parts * n, [(n, parts), (1, n)], esize)
        return Descriptor(Op.ADD, src, dst, AddDtype.FP32)
    src = Side(Space.HBM, 0, parts, parts * n, [(parts, n), (1, parts)], esize)
    return Descriptor(Op.TRANSPOSE, src, dst)


@cocotb.test()
async def test_bandwidth(dut):
    """``ncrtl bench --only dma``: cycles of one descriptor per kind and size (no stalls, full
    memory bandwidth), each checked against the golden; counters ``bw_<kind>_<size>``."""
    params, _, seed, _ = tb_settings()
    geo = Geometry(params["partitions"], params["partition_bytes"], params["hbm_bytes"])
    rng = np.random.default_rng(seed)
    mem = Memories(
        np.zeros((geo.partitions, geo.partition_bytes), np.uint8),
        rng.integers(0, 256, geo.hbm_bytes, dtype=np.uint8),
    )
    tb = DmaTB(dut, params, mem.hbm.copy(), stall=0.0, seed=seed)
    tb.mem.bandwidth = 1.0
    await tb.reset()
    sb = Scoreboard("dma.bench", "tag, then code", bits=16)
    timing_sb = Scoreboard("dma.timing", "cycles per descriptor, RTL vs timing model", bits=32)
    timing = EngineTiming(
        word_bytes=params["word_bytes"],
        overhead=params["overhead"],
        outstanding=params["outstanding"],
        burst=params["burst"],
        part_bits=tb.wd.part_bits,
        read_latency=tb.mem.latency,
        write_latency=tb.mem.latency,
    )

    async def measure(desc):
        """Run ``desc``; its cycles in a back-to-back stream (from the previous completion's
        acceptance to its own: the timing model's cycles + 1), checked against the model."""
        gold, code, msg = execute(desc, geo, mem)
        t0 = int(tb.status.cycle)
        tag, got = await tb.run(desc)
        cycles = int(tb.status.cycle) - t0
        sb.compare_sequence([got], [int(code)])
        timing_sb.compare_sequence([cycles], [transfer_cycles(desc, geo, mem, timing).cycles + 1])
        assert code == 0, msg
        return cycles

    # A first descriptor puts the testbench where every later one starts: just after a
    # completion's acceptance, the cycle the timing model counts from.
    await tb.run(bench_descriptors(geo, 64, "copy"))
    figures = {}
    for kind in BENCH_KINDS:
        for size in BENCH_SIZES:
            desc = bench_descriptors(geo, size, kind)
            if size > geo.partition_bytes or desc.src.extent * desc.src.esize > geo.hbm_bytes:
                continue
            figures[f"bw_{kind}_{size}"] = await measure(desc)
            figures[f"bytes_{kind}_{size}"] = desc.src.count * desc.src.esize
    # SBUF -> SBUF transpose: at most [P, P] on P partitions, so it is compared with a copy of
    # the same bytes from the device memory, both less the fixed per-transfer overhead.
    from ncrtl.model.dma import Descriptor, Op, Side, Space

    p, esize = geo.partitions, 4
    half = geo.partition_bytes // 2
    pair = {
        "sbuf_transpose": Descriptor(
            Op.TRANSPOSE,
            Side(Space.SBUF, half, p, p * p, [(p, p), (1, p)], esize),
            Side(Space.SBUF, 0, p, p * p, [(p, p), (1, p)], esize),
        ),
        "sbuf_transpose_copy": Descriptor(
            Op.COPY,
            Side(Space.HBM, 0, p, p * p, [(p, p), (1, p)], esize),
            Side(Space.SBUF, 0, p, p * p, [(p, p), (1, p)], esize),
        ),
    }
    for name, desc in pair.items():
        figures[name] = await measure(desc) - params["overhead"]
    for b in (sb, timing_sb):
        b.write_json()
    write_counters(**figures)
    for b in (sb, timing_sb):
        b.assert_clean()
