"""cocotb conformance of :class:`ncrtl.hdl.tensor_engine.top.TensorEngine` against the golden and the
timing model.

A random program (``ncrtl.testbench.tensor_engine.program``) of LS / MM instructions in one mode, with
illegal instructions mixed in, streams into the engine; every output vector is compared bit for bit
with ``ncrtl.model.tensor_engine.matmul``, every error pulse with ``isa.check``, and (in the stall-free
test) the cycle of every output vector and error with ``ncrtl.model.tensor_engine.timing``.
"""

import time
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge, with_timeout

from ncrtl.hdl.tensor_engine.pe import LANE_WIDTH, moving_width, sparse_slot_width
from ncrtl.hdl.tensor_engine.top import lane_groups, stationary_beats
from ncrtl.model.modes import pe_modes
from ncrtl.model.tensor_engine import isa
from ncrtl.model.tensor_engine.isa import Op
from ncrtl.model.tensor_engine.timing import chain_count, chain_width, tile_col_groups, tile_tap
from ncrtl.testbench import player, progress
from ncrtl.testbench.conformance import tb_settings
from ncrtl.testbench.player import PlayerPort
from ncrtl.testbench.scoreboard import Scoreboard, write_counters, write_timings
from ncrtl.testbench.stream import StreamBus, StreamSink, StreamSource, pack_lanes, unpack_lanes
from ncrtl.testbench.tensor_engine.program import (
    background_program,
    expected_outputs,
    lane_words,
    parallel_program,
    random_program,
    sparse_program,
)

#: Bits of one result lane (FP32, or a transpose word).
LANE = 32


class TensorEngineTB:
    """Clock, reset, three stream sources (instructions, stationary, moving), the output sink and
    a watcher that records instruction-accept cycles and error pulses.

    Cycle numbers of the sink and the watcher count the same rising edges from the start.
    """

    def __init__(self, dut, rows, cols, *, stall=0.0, seed=0, tile_unit=32, streams=0):
        self.dut, self.rows, self.cols, self.tile_unit = dut, rows, cols, tile_unit
        Clock(dut.clk, 10, unit="ns").start()
        dut.rst.value = 1
        clk, rst = dut.clk, dut.rst
        self.instr = StreamSource(
            StreamBus.from_prefix(dut, "instr"), clk, rst, stall=stall, seed=seed
        )

        def sources(name, n, salt):
            if not n:
                bus = StreamBus.from_prefix(dut, name)
                return [StreamSource(bus, clk, rst, stall=stall, seed=seed + salt)]
            return [
                StreamSource(
                    StreamBus.from_prefix(dut, f"{name}__{i}"),
                    clk,
                    rst,
                    stall=stall,
                    seed=seed + salt + 10 * i,
                )
                for i in range(n)
            ]

        # One stream each, or a stream per lane group (parallel tiles) or per plane.
        self.stat = sources("stationary", streams, 1)
        self.mov = sources("moving", streams, 2)
        self.out = StreamSink(
            StreamBus.from_prefix(dut, "result"), clk, rst, backpressure=stall, seed=seed + 3
        )
        self.accepted = []  # cycle of each accepted instruction word
        self.errors = []  # (cycle, code) of each error pulse
        self._watcher = cocotb.start_soon(self._watch())

    async def _watch(self):
        dut = self.dut
        edge = dut.clk.rising_edge
        cycle = 0
        while True:
            await edge
            cycle += 1
            if dut.instr__valid.value == 1 and dut.instr__ready.value == 1:
                self.accepted.append(cycle)
            if dut.error__valid.value == 1:
                self.errors.append((cycle, int(dut.error__code.value)))

    async def reset(self, cycles=2):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, cycles)
        self.dut.rst.value = 0

    def load(self, prog):
        """Queue every instruction word and the data beats of the instructions the engine
        accepts (a rejected instruction consumes no data)."""
        instr, stat, mov = _beats(prog, self.rows)
        self.instr.send(instr)
        for src, words in zip(self.stat + self.mov, stat + mov):
            src.send(words)


def player_ports(rows, cols, tile_unit=32, x_width=LANE_WIDTH):
    """The engine's ports as :mod:`ncrtl.testbench.player` plays them: the three input streams
    (``x_width``: the moving lane word's bits), the result stream and the error strobe with
    its code."""
    chains = chain_count(cols, tile_unit)
    return [
        PlayerPort("source", "instr", isa.instruction_bits()),
        PlayerPort("source", "stationary", chains * rows * LANE_WIDTH),
        PlayerPort("source", "moving", rows * x_width),
        PlayerPort("sink", "result", cols * LANE + 1),
        PlayerPort("strobe", "error__valid", value="error__code", value_width=4),
    ]


def _streams(prog):
    """The engine's ``stationary`` / ``moving`` streams of each kind: one per lane group with
    parallel tiles, one per plane with the background plane; 0: one stream, not an array."""
    if prog.parallel:
        return (prog.rows // prog.tile_unit) * chain_count(prog.cols, prog.tile_unit)
    return 2 if prog.background else 0


def _taps(prog):
    """``(taps, column groups)`` of the result word: output taps (parallel tiles) or planes,
    and column groups."""
    if prog.parallel:
        return prog.rows // prog.tile_unit, chain_count(prog.cols, prog.tile_unit)
    return (2, 1) if prog.background else (1, 1)


def _beats(prog, rows):
    """Instruction words and, per stream, the stationary and moving beats of the accepted
    instructions (a rejected instruction consumes no data), as payload ints: one stream each,
    with parallel tiles one per lane group (``lane_groups``), with the background plane one
    per plane."""
    instr = [isa.encode(s.ins) for s in prog.steps]
    n = max(1, _streams(prog))
    stat, mov = [[] for _ in range(n)], [[] for _ in range(n)]
    for s, _, plane in prog.placed_steps():
        ins = s.ins.whole(rows, prog.cols)
        if ins.sparse and ins.op == Op.MM:
            words = lane_words(s.data, slot=prog.slot)  # [N, K] Python ints
        else:
            words = lane_words(s.data, s.scale, tags=s.tags)  # [X, K]
        width = LANE_WIDTH
        if ins.op == Op.LS:
            beats = stationary_beats(words, ins, rows, prog.cols, prog.tile_unit)
            out = stat
        else:
            beats = np.zeros((words.shape[0], rows), dtype=object)
            beats[:, ins.tile_row : ins.tile_row + ins.k] = words
            out, width = mov, prog.x_width
        if not prog.parallel:
            out[plane] += _pack(beats, width)
            continue
        for i, lanes in lane_groups(ins, rows, prog.cols, prog.tile_unit):
            out[i] += _pack(beats[:, lanes], width)
    return instr, stat, mov


def _pack(beats, width):
    """:func:`pack_lanes`, or for lanes wider than 64 bits (a sparse engine's moving words)
    the same packing on Python ints."""
    if width <= 64:
        return pack_lanes(np.asarray(beats, dtype=np.uint64), width)
    return [sum(int(v) << (width * i) for i, v in enumerate(row)) for row in beats]


async def _drive_python(dut, prog, total, *, stall, seed):
    """The program through the Python drivers (:class:`TensorEngineTB`): per-cycle coroutines."""
    rows, cols = prog.rows, prog.cols
    tb = TensorEngineTB(
        dut,
        rows,
        cols,
        stall=stall,
        seed=seed,
        tile_unit=prog.tile_unit,
        streams=_streams(prog),
    )
    await tb.reset()
    tb.load(prog)
    t_run, c_run = time.perf_counter(), tb.out.cycle
    bar = progress.watch(lambda: (tb.out.cycle - c_run, len(tb.out.cycles)), total)
    if prog.split:  # a handshake carries a vector of every tile / plane that has one
        got_words = await _recv_vectors(tb, prog, total)
    else:
        got_words = await tb.out.recv(total, timeout=5000)
    t_run, c_run = time.perf_counter() - t_run, tb.out.cycle - c_run
    if bar:
        bar.cancel()
    await tb.instr.wait()
    await ClockCycles(dut.clk, 8)  # let the last error pulses land
    return dict(
        words=got_words,
        out_cycles=list(tb.out.cycles),
        accepted=list(tb.accepted),
        errors=list(tb.errors),
        cycles=tb.out.cycle,
        run_cycles=c_run,
        run_s=t_run,
    )


async def _recv_vectors(tb, prog, total, timeout=5000):
    """With parallel tiles or the background plane: the result words until they hold
    ``total`` tile vectors."""
    taps, groups = _taps(prog)
    n_bits = 32 * taps * prog.cols
    width = taps * groups
    mask = (1 << width) - 1
    seen, idle = 0, 0
    while seen < total:
        await RisingEdge(tb.dut.clk)
        got = sum(bin((w >> n_bits) & mask).count("1") for w in tb.out.words)
        idle = 0 if got > seen else idle + 1
        seen = got
        if idle > timeout:
            raise TimeoutError(f"result: {seen} of {total} tile vectors; none for {timeout} cycles")
    return list(tb.out.words)


def write_player_files(folder, prog, total, *, stall, seed):
    """The player files of ``prog`` in ``folder`` (:mod:`ncrtl.testbench.player`): the three
    streams' beats with their seeded idle cycles, and the config (``total``: the output vectors
    to wait for); what the Verilog players and the C++ loops
    (:mod:`ncrtl.testbench.tensor_engine.loop_run`) play.  Returns the number of input beats."""
    folder = Path(folder)
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(seed + 101)
    instr, (stat,), (mov,) = _beats(prog, prog.rows)  # the serial engine: one stream each
    beats = {"instr": instr, "stationary": stat, "moving": mov}
    for name, words in beats.items():
        idle = rng.geometric(1.0 - stall, len(words)) - 1 if stall else None
        player.write_beats(folder / f"{name}.in", words, idle)
    n_beats = sum(len(w) for w in beats.values())
    player.write_config(
        folder, seed=seed, backpressure=stall, expect=total, timeout=200_000 + 20 * n_beats
    )
    return n_beats


def read_player_files(folder):
    """What a played run left in ``folder``: the result words and their cycles, the cycles
    of the accepted instructions and the error strobes ``(cycle, code)``."""
    folder = Path(folder)
    out_cycles, words = player.read_beats(folder / "result.out")
    err_cycles, codes = player.read_beats(folder / "error__valid.out", base=10)
    return dict(
        words=words,
        out_cycles=out_cycles,
        accepted=player.read_log(folder / "instr.log"),
        errors=list(zip(err_cycles, codes)),
    )


async def _drive_player(dut, prog, total, *, stall, seed):
    """The program through the Verilog stream players (:mod:`ncrtl.testbench.player`): the
    files are written, the simulator runs to ``done`` without waking Python."""
    folder = Path(player.FOLDER)
    n_beats = write_player_files(folder, prog, total, stall=stall, seed=seed)
    Clock(dut.clk, 10, unit="ns").start()
    dut.rst.value, dut.go.value = 1, 0
    await ClockCycles(dut.clk, 2)
    dut.rst.value, dut.go.value = 0, 1
    # The cycle counter runs over the whole simulation; read it once this edge's updates have
    # landed (before them it still shows the previous cycle).
    await ReadOnly()
    start = int(dut.o_cycle.value)
    t_run = time.perf_counter()
    bar = progress.watch(lambda: (int(dut.o_cycle.value) - start, int(dut.o_received.value)), total)
    # The players stop at their own cycle timeout; this one only guards against a model that
    # never raises done.
    timeout = 10 * (200_000 + 20 * n_beats) + 1000
    await with_timeout(RisingEdge(dut.done), timeout * 10, "ns")
    t_run = time.perf_counter() - t_run
    if bar:
        bar.cancel()
    dut.go.value = 0
    run_cycles = int(dut.o_cycle.value) - start
    return dict(
        read_player_files(folder),
        cycles=run_cycles + 2,  # with the reset cycles, as the Python drivers count
        run_cycles=run_cycles,
        run_s=t_run,
    )


async def run_program(dut, prog, *, stall, seed, check_timing, t_start=None):
    """Stream ``prog`` into the engine and check it; returns its cycle figures and the result
    vectors.  A model built with stream players (top ``*_player``) plays the program in Verilog;
    otherwise the Python drivers stream it.  The wall time of each step goes to the summary
    (``t_start``: when the testbench started, before it made the program)."""
    t_start = time.time() if t_start is None else t_start
    t_begin = time.perf_counter()
    rows, cols, unit = prog.rows, prog.cols, prog.tile_unit
    t_golden = time.perf_counter()
    expect = expected_outputs(prog)
    t_golden = time.perf_counter() - t_golden
    if prog.parallel:  # an MM's vector per column group of its tile
        total = sum(
            bits.shape[1] * len(tile_col_groups(valid_ins, rows, cols, unit))
            for valid_ins, bits in _mm_bits(prog, expect)
        )
    else:
        total = sum(bits.shape[1] for _, bits in expect)
    if prog.split and dut._name.endswith("_player"):
        raise ValueError("the stream players drive the serial engine only (one stream each)")
    drive = _drive_player if dut._name.endswith("_player") else _drive_python
    obs = await drive(dut, prog, total, stall=stall, seed=seed)
    t_run, c_run = obs["run_s"], obs["run_cycles"]
    t_compare = time.perf_counter()
    check = _check_parallel if prog.split else _check_serial
    boards, got = check(dut, prog, expect, obs, check_timing)
    t_end = time.perf_counter()
    write_counters(cycles=obs["cycles"], run_cycles=c_run, run_us=int(t_run * 1e6))
    write_timings(
        start_unix=t_start,
        golden_s=t_golden,
        stream_s=t_run,
        compare_s=t_end - t_compare,
        setup_s=t_end - t_begin - t_golden - t_run - (t_end - t_compare),
    )
    for b in boards:
        b.assert_clean()
    return {
        "first_instr": obs["accepted"][0],
        "first_out": obs["out_cycles"][0] if obs["out_cycles"] else 0,
        "last_out": obs["out_cycles"][-1] if obs["out_cycles"] else 0,
        # [vectors, cols] result lane words in arrival order; with parallel tiles per output
        # tap and column group (tap * groups + group) a list of (cycle, lanes, last)
        "vectors": got,
    }


def _mm_bits(prog, expect):
    """``(instruction, [M, N] bits)`` of every accepted MM, in program order."""
    valid = prog.valid_steps()
    return [(valid[idx][0].ins, bits) for idx, bits in expect]


def _check_serial(dut, prog, expect, obs, check_timing):
    """One result stream: every vector bit for bit, the last flags, the error codes
    (``isa.check``) and, with ``check_timing``, every output and error cycle."""
    rows, cols, unit = prog.rows, prog.cols, prog.tile_unit
    got_words = obs["words"]
    data_mask = (1 << (LANE * cols)) - 1
    got = unpack_lanes([w & data_mask for w in got_words], LANE, cols)  # [vectors, cols]
    got_last = np.array([w >> (LANE * cols) for w in got_words], dtype=np.int64)
    sb = _value_board(dut)
    pos = 0
    want_last = []
    for ins, bits in _mm_bits(prog, expect):
        ins = ins.whole(rows, cols)
        m, n = bits.shape
        vec = got[pos : pos + n, ins.tile_col : ins.tile_col + m].T  # [M, N]
        sb.compare(vec.astype(np.int64), bits.astype(np.int64))
        want_last += [0] * (n - 1) + [1]
        pos += n
    sb.write_json()
    dut._log.info(sb.report())
    # The last flag: set on the last vector of every MM.
    lb = Scoreboard("tensor_engine.last", "flag", bits=1)
    lb.compare_sequence(got_last, want_last)
    lb.write_json()

    # Errors: one pulse per rejected instruction, with isa.check's code, in program order.
    want_codes = []
    last_ls = None
    for s in prog.steps:
        err = isa.check(s.ins, rows, cols, last_ls, tile_unit=unit, sparse=prog.sparse)
        if err is None and s.ins.op == Op.LS:
            last_ls = s.ins
        if err is not None:
            want_codes.append(int(err[0]))
    eb = _error_board(dut, obs, want_codes)
    boards = [sb, lb, eb]
    if check_timing:
        sched = prog.schedule()
        t0 = obs["accepted"][0]
        want_out = [c for r in sched.records for c in r.outputs]
        tsb = Scoreboard("tensor_engine.output_cycles", "count, then cycles", bits=32)
        tsb.compare_sequence([c - t0 for c in obs["out_cycles"]], want_out)
        boards.append(_timing_board(dut, tsb, obs, sched))
    return boards, got


def _check_parallel(dut, prog, expect, obs, check_timing):
    """Parallel tiles or the background plane: the result words split per output tap (or
    plane) and column group; every MM's vectors on its tap's column groups (its plane's
    vector) bit for bit, their last flags, the error codes of the timing model (``TILE_BUSY``
    depends on timing) and, with ``check_timing``, the cycle of every vector and error."""
    rows, cols, unit = prog.rows, prog.cols, prog.tile_unit
    taps, groups = _taps(prog)
    G = chain_width(cols, unit) if prog.parallel else cols
    n_data, n = LANE * taps * cols, taps * groups
    streams = {key: [] for key in range(n)}  # (cycle, lanes, last) per tap * groups + group
    for cycle, w in zip(obs["out_cycles"], obs["words"]):
        lanes = unpack_lanes([w & ((1 << n_data) - 1)], LANE, taps * cols)[0]
        valid, last = (w >> n_data) & ((1 << n) - 1), (w >> (n_data + n)) & ((1 << n) - 1)
        for i in range(n):
            if valid >> i & 1:
                streams[i].append((cycle, lanes[i * G : (i + 1) * G], last >> i & 1))
    sched = prog.schedule()
    sb = _value_board(dut)
    lb = Scoreboard("tensor_engine.last", "flag", bits=1)
    tsb = Scoreboard("tensor_engine.output_cycles", "count, then cycles", bits=32)
    t0 = obs["accepted"][0] if obs["accepted"] else 0
    pos = {key: 0 for key in streams}
    outputs = {r.index: r.outputs for r in sched.records}
    planes = {r.index: r.plane for r in sched.records}
    index = {id(s.ins): i for i, s in enumerate(prog.steps)}
    got_last, want_last, got_cyc, want_cyc = [], [], [], []
    for ins, bits in _mm_bits(prog, expect):
        whole = ins.whole(rows, cols)
        m, n_vec = bits.shape
        if prog.parallel:
            g, col_groups = tile_tap(ins, rows, cols, unit), tile_col_groups(ins, rows, cols, unit)
        else:
            g, col_groups = planes[index[id(ins)]], [0]
        vec = np.zeros((n_vec, cols), dtype=np.int64)
        for j in col_groups:
            key = g * groups + j
            got = streams[key][pos[key] : pos[key] + n_vec]
            pos[key] += n_vec
            for v, (cycle, lanes, last) in enumerate(got):
                vec[v, j * G : (j + 1) * G] = lanes
                got_last.append(last)
                got_cyc.append(cycle - t0)
            want_last += [0] * (n_vec - 1) + [1]
            want_cyc += list(outputs[index[id(ins)]])
        sb.compare(vec[:, whole.tile_col : whole.tile_col + m].T, bits.astype(np.int64))
    extra = sum(len(v) - pos[k] for k, v in streams.items())
    lb.compare_sequence(got_last + [2] * extra, want_last)
    for b in (sb, lb):
        b.write_json()
    dut._log.info(sb.report())
    want_codes = [int(r.error) for r in sched.records if not r.accepted]
    eb = _error_board(dut, obs, want_codes)
    boards = [sb, lb, eb]
    if check_timing:
        tsb.compare_sequence(got_cyc, want_cyc)
        boards.append(_timing_board(dut, tsb, obs, sched))
    return boards, streams


def _value_board(dut):
    return Scoreboard(
        f"tensor_engine.{dut._name}",
        "fp32/raw",
        bits=32,
        decode=lambda x: np.asarray(x, np.uint32).view(np.float32),
    )


def _error_board(dut, obs, want_codes):
    eb = Scoreboard("tensor_engine.errors", "count, then codes", bits=8)
    eb.compare_sequence([c for _, c in obs["errors"]], want_codes)
    eb.write_json()
    dut._log.info(eb.report())
    return eb


def _timing_board(dut, tsb, obs, sched):
    """``tsb`` (output cycles compared) with the error cycles added, written and reported."""
    t0 = obs["accepted"][0]
    want_err = [r.error_cycle for r in sched.records if r.error_cycle is not None]
    tsb.compare_sequence([c - t0 for c, _ in obs["errors"]], want_err)
    tsb.write_json()
    dut._log.info(tsb.report())
    return tsb


def conformance_program(seed, salt, *, timed=True, settings=None):
    """The random program of a conformance test: ``settings`` ``(params, count)`` of the run
    (default: the testbench's, :func:`~ncrtl.testbench.conformance.tb_settings`), ``salt`` 1
    for the timed test, 2 for the one with stalls (``timed`` False: no instruction whose
    acceptance depends on timing)."""
    params, count = settings if settings is not None else tb_settings()[:2]
    rng = np.random.default_rng(seed * 7919 + salt)
    rows, cols = params["rows"], params["cols"]
    # ``count`` bounds the moving vectors of the program: groups of up to 3 MMs of up to max_n.
    max_n = int(min(isa.MAX_N_ANY, max(1, params.get("max_n", 96))))
    groups = max(1, count // (2 * max_n))
    if params.get("mode") == "sparse":
        modes = pe_modes(params.get("pe_modes", "all"))
        return sparse_program(
            rng,
            rows,
            cols,
            groups=groups,
            max_n=max_n,
            tile_unit=params.get("tile_unit", 32),
            x_width=moving_width(modes, True),
            slot=sparse_slot_width(modes),
            modes=modes,
        )
    if params.get("background_transpose"):
        # matmuls and transposes of the mode one after another, on both planes
        return background_program(
            rng,
            rows,
            cols,
            params["mode"],
            groups=max(2, min(12, groups)),
            max_n=min(max_n, 24),
            tile_unit=params.get("tile_unit", 32),
        )
    if params.get("parallel_tiles"):
        # tiles side by side: a tiling of the mode, a few LS + MM pairs per tile
        return parallel_program(
            rng,
            rows,
            cols,
            params["mode"],
            pairs=max(1, min(4, groups)),
            max_n=min(max_n, 24),
            tile_unit=params.get("tile_unit", 32),
            finale=timed,  # whether a tile is busy depends on timing: not with stalls
        )
    prog = random_program(
        rng,
        rows,
        cols,
        params["mode"],
        groups=groups,
        max_n=max_n,
        tile_unit=params.get("tile_unit", 32),
    )
    if params.get("sparse"):  # the dense modes on the sparse engine's wider moving words
        prog.sparse = True
        prog.x_width = moving_width(pe_modes(params.get("pe_modes", "all")), True)
    return prog


@cocotb.test()
async def test_program_timing(dut):
    """No stalls: values, error codes, and the cycle of every output vector and error pulse."""
    params, count, seed, _ = tb_settings()
    await run_program(dut, conformance_program(seed, 1), stall=0.0, seed=seed, check_timing=True)


@cocotb.test()
async def test_program_stalls(dut):
    """Random input stalls and output backpressure: values and error codes, nothing lost."""
    params, count, seed, stall = tb_settings()
    await run_program(
        dut,
        conformance_program(seed, 2, timed=False),
        stall=max(stall, 0.2),
        seed=seed + 11,
        check_timing=False,
    )
