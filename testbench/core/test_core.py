"""cocotb conformance of :class:`ncrtl.hdl.core.top.MatmulCore`: Tensor Engine matmuls accumulated in
PSUM, against the golden :func:`ncrtl.model.core.nc_matmul`.

A contraction of ``chunks`` x ``rows`` partitions is done as ``chunks`` LoadStationary +
MultiplyMoving pairs whose PSUM writes form one accumulation group in one bank (the first
overwrites, the last closes the group: :func:`ncrtl.model.core.chunk_flags`); the usual way to
multiply a K = 512 contraction on a 128-row array; in the MX mode each matmul carries the E8M0
scales of its PE rows in its lane words.  The testbench streams the Tensor Engine
instructions and data and the PSUM write instructions, waits for the group-complete event, reads
the bank back through the Vector Engine port and compares every word bit for bit with the golden
PSUM.  Parameters (``NCRTL_PARAMS``): the ``core`` block's (``ncrtl list``).

``ncrtl sim matmul --psum`` adds a job (``NCRTL_CORE_JOB``, JSON): ``fmt_s`` / ``fmt_m`` (format
indices of the random data, else drawn), ``special`` (random data with signed zeros,
subnormals, infinities and NaNs), ``data`` (an ``.npz`` of ``stationary`` / ``moving`` encodings
of the whole contraction, ``[chunks x rows, ...]`` in :func:`tile_shape`, and their format
indices ``fmt_s`` / ``fmt_m``) and ``out`` (an ``.npy`` path for the bank words read back,
``[slots, partitions]`` uint32).
"""

import json
import os
from dataclasses import dataclass

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles

from ncrtl.hdl.tensor_engine.pe import LANE_WIDTH
from ncrtl.hdl.tensor_engine.top import stationary_beats
from ncrtl.model.core import chunk_flags, nc_matmul
from ncrtl.model.modes import operation
from ncrtl.model.psum import Dtype, Geometry, Psum, Rounding, Write
from ncrtl.model.psum import encode as psum_encode
from ncrtl.model.tensor_engine import isa
from ncrtl.model.tensor_engine.isa import Instruction, Op
from ncrtl.testbench import progress
from ncrtl.testbench.conformance import tb_settings
from ncrtl.testbench.psum.program import EngineReq, req_word
from ncrtl.testbench.scoreboard import Scoreboard, write_counters
from ncrtl.testbench.stream import StreamBus, StreamSink, StreamSource, pack_lanes, unpack_lanes
from ncrtl.testbench.tensor_engine.program import (
    _as_dtype,
    _selection,
    _values,
    lane_words,
    random_scales,
    special_values,
    tile_shape,
)


@dataclass
class Chunk:
    """One ``nc_matmul`` of the program: its LS and MM, their data (encodings in
    :func:`tile_shape`), the MX scales of every PE row (``[K, M]`` / ``[K, N]`` uint8, None
    outside MX) and its PSUM write."""

    ls: Instruction
    stationary: np.ndarray
    stationary_scale: object
    mm: Instruction
    moving: np.ndarray
    moving_scale: object
    write: Write


def chunked_program(params, seed, job=None):
    """The :class:`Chunk` list of the block parameters: ``chunks`` matmuls of K = rows, one
    stationary and one moving format drawn for the program (the mode's formats), or those and
    the data of ``job`` (see the module docstring)."""
    job = job or {}
    rows, cols = params["rows"], params["cols"]
    pe_mode, transpose = operation(params["mode"])
    n, chunks, bank = params["n"], params["chunks"], params["bank"]
    dtype = Dtype.RAW16 if transpose else Dtype[params["psum"].upper()]
    rounding = Rounding[params["rounding"].upper()]
    rng = np.random.default_rng(seed)
    fs = int(rng.integers(0, len(pe_mode.formats_s)))
    fm = fs if transpose else int(rng.integers(0, len(pe_mode.formats_m)))
    data = np.load(job["data"]) if job.get("data") else None
    if data is not None:
        fs, fm = int(data["fmt_s"]), int(data["fmt_m"])
    elif "fmt_s" in job:
        fs, fm = int(job["fmt_s"]), int(job["fmt_m"])
    if job.get("special"):
        # Zeros and subnormals in a tenth of the elements; infinities and NaNs in about a fifth
        # of the accumulated values, whatever the contraction's length.
        nonfinite = 0.1 / (chunks * rows * pe_mode.products)

        def values(fmt, shape):
            return special_values(rng, fmt, shape, 0.1, nonfinite)
    else:
        special = 0.0 if "fmt_s" in job or data is not None else 0.002

        def values(fmt, shape):
            return _values(rng, fmt, shape, special=special)

    # A matmul with a BF16 result says so (MX: N up to 1024).
    fields = dict(fmt_s=fs, fmt_m=fm, transpose=transpose, bf16_out=dtype == Dtype.BF16)
    scales = (
        (lambda x: random_scales(rng, (rows, x), special=0.005))
        if pe_mode.scale
        else (lambda x: None)
    )
    prog = []
    for i in range(chunks):
        k = rows
        ls = Instruction(Op.LS, pe_mode.code, k=k, m=cols, **fields)
        mm = Instruction(Op.MM, pe_mode.code, k=k, m=cols, n=n, **fields)
        s_fmt, m_fmt = ls.formats
        if data is not None:
            st = data["stationary"][i * rows : (i + 1) * rows]
            mv = data["moving"][i * rows : (i + 1) * rows]
        else:
            st = values(s_fmt, tile_shape(pe_mode, k, cols))
            mv = (
                _selection(rng, k, n, m_fmt)
                if transpose
                else values(m_fmt, tile_shape(pe_mode, k, n))
            )
        flags = 3 if transpose else chunk_flags(i, chunks)
        w = Write(bank=bank, col=0, n=n, dtype=dtype, rounding=rounding, flags=flags)
        prog.append(Chunk(ls, st, scales(cols), mm, mv, scales(n), w))
    return prog


def golden(params, prog):
    """The golden PSUM after the program, and the group-complete banks."""
    g = Geometry(params["cols"], params["banks"], params["bank_bytes"])
    psum = Psum(g)  # generators at their reset state, like the RTL's
    done = []
    for c in prog:
        fs, fm = c.mm.formats
        if c.mm.pe_mode.scale:
            mode_kwargs = dict(
                stationary_scale=c.stationary_scale,
                moving_scale=c.moving_scale,
                tile_unit=params["tile_unit"],
            )
        else:
            mode_kwargs = dict(
                perf_mode=c.mm.pe_mode.perf_mode,
                is_transpose=c.mm.transpose,
                stationary_format=fs,
                moving_format=fm,
            )
        bank = nc_matmul(
            psum,
            c.write,
            _as_dtype(c.stationary, fs),
            _as_dtype(c.moving, fm),
            rows=params["rows"],
            **mode_kwargs,
        )
        if bank is not None:
            done.append(bank)
    return psum, done


class MatmulCoreTB:
    """Clock, reset, the Tensor Engine's three sources, the PSUM instruction source, the Vector
    Engine request source and response sink (the Scalar Engine port and the seed port idle),
    and a watcher of the event and error strobes.

    Cycle numbers of the watcher and the sink count the same rising edges from the start.
    """

    def __init__(self, dut, params, *, stall=0.0, seed=0):
        self.dut, self.params = dut, params
        clk = dut.clk
        Clock(clk, 10, unit="ns").start()
        dut.rst.value = 1
        rst = dut.rst
        bus = lambda name: StreamBus.from_prefix(dut, name)  # noqa: E731
        self.instr = StreamSource(bus("te_instr"), clk, rst, stall=stall, seed=seed)
        self.stat = StreamSource(bus("stationary"), clk, rst, stall=stall, seed=seed + 1)
        self.mov = StreamSource(bus("moving"), clk, rst, stall=stall, seed=seed + 2)
        self.pinstr = StreamSource(bus("psum_instr"), clk, rst, stall=stall, seed=seed + 3)
        self.ve = StreamSource(bus("ve__req"), clk, rst, stall=stall, seed=seed + 4)
        self.ve_resp = StreamSink(bus("ve__resp"), clk, rst, backpressure=stall, seed=seed + 5)
        dut.se__req__valid.value = 0
        dut.se__resp__ready.value = 1
        dut.seed__valid.value = 0
        self.done = []  # (cycle, bank) of each o_done pulse
        self.errors = []  # (cycle, "te" | "psum", code)
        self.cycle = 0
        self._watcher = cocotb.start_soon(self._watch())

    async def _watch(self):
        dut = self.dut
        while True:
            await dut.clk.rising_edge
            self.cycle += 1
            if dut.o_done.value == 1:
                self.done.append((self.cycle, int(dut.o_done_bank.value)))
            if dut.te_error__valid.value == 1:
                self.errors.append((self.cycle, "te", int(dut.te_error__code.value)))
            if dut.psum_error__valid.value == 1:
                self.errors.append((self.cycle, "psum", int(dut.psum_error__code.value)))

    async def reset(self, cycles=2):
        await ClockCycles(self.dut.clk, cycles)
        self.dut.rst.value = 0

    def load(self, prog):
        rows = self.params["rows"]
        words = []
        for c in prog:
            words += [isa.encode(c.ls), isa.encode(c.mm)]
            st = lane_words(c.stationary, c.stationary_scale)  # [M, K]
            cols, unit = self.params["cols"], self.params.get("tile_unit", 32)
            self.stat.send(pack_lanes(stationary_beats(st, c.ls, rows, cols, unit), LANE_WIDTH))
            lanes = lane_words(c.moving, c.moving_scale)  # [N, K]
            beats = np.zeros((lanes.shape[0], rows), dtype=np.uint64)
            beats[:, : lanes.shape[1]] = lanes.astype(np.uint64)
            self.mov.send(pack_lanes(beats, LANE_WIDTH))
            self.pinstr.send([psum_encode(c.write)])
        self.instr.send(words)

    async def read_rows(self, bank, rows):
        """Read memory words ``(bank, row)`` for ``row`` in ``rows`` through the VE port."""
        p = self.params["cols"]
        self.ve.send([req_word(EngineReq(we=0, mask=0, bank=bank, row=r), p) for r in rows])
        words = await self.ve_resp.recv(len(rows), timeout=20_000)
        return unpack_lanes(words, 32, p)  # [rows, partitions]


@cocotb.test()
async def test_chunked_matmul(dut):
    """chunks x (LS + MM) accumulated in one PSUM bank, then read back: bit for bit."""
    params, _, seed, stall = tb_settings()
    job = json.loads(os.environ.get("NCRTL_CORE_JOB", "{}"))
    prog = chunked_program(params, seed, job)
    want, want_done = golden(params, prog)
    tb = MatmulCoreTB(dut, params, stall=stall, seed=seed)
    await tb.reset()
    tb.load(prog)
    start = tb.cycle
    n_groups = len(want_done)
    bar = progress.watch(lambda: (tb.cycle - start, len(tb.done)), n_groups, unit="PSUM groups")
    for _ in range(200_000):
        if len(tb.done) >= n_groups and tb.pinstr.idle and tb.mov.idle:
            break
        await ClockCycles(dut.clk, 1)
    if bar:
        bar.cancel()
    await ClockCycles(dut.clk, 4)
    finish = tb.done[-1][0] if tb.done else tb.cycle
    w = prog[-1].write
    slots = w.n if w.dtype == Dtype.FP32 else (w.n + 1) // 2
    got = await tb.read_rows(w.bank, range(slots))
    if job.get("out"):
        np.save(job["out"], np.asarray(got).astype(np.uint32))
    ref = want.mem[w.bank, :slots, :]
    name = f"core.psum_{Dtype(w.dtype).name.lower()}"
    decode = (
        (lambda x: np.asarray(x, np.uint32).view(np.float32)) if w.dtype == Dtype.FP32 else None
    )
    sb = Scoreboard(name, "fp32" if w.dtype == Dtype.FP32 else "2 x 16-bit", bits=32, decode=decode)
    sb.compare(got.astype(np.int64), ref.astype(np.int64))
    eb = Scoreboard("core.events", "count, then bank / 1000 + error", bits=16)
    eb.compare_sequence([b for _, b in tb.done] + [1000 + c for _, _, c in tb.errors], want_done)
    for b in (sb, eb):
        b.write_json()
        dut._log.info(b.report())
    write_counters(cycles=finish - start, chunks=len(prog))
    sb.assert_clean()
    eb.assert_clean()
