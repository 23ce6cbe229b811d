"""``ncrtl run`` in linear time (docs/kernels.md, "Speed"): each phase's work per instruction stays
flat as a kernel grows, and the waits the builder finds in that time are the ones the
all-pairs rule gives.

The work is counted, never timed: the builder's steps (``build.work``: live tensors passed
over in placement, intervals visited in the dependency maps), the timing run's events and the
spans its searches of the shared SBUF bus and PSUM banks visit, the Perfetto trace's events,
and the objects left allocated.  Each kernel of tests/kernels/linear.py runs at n and 4n
steps; per instruction, no count may grow by more than 10%.
"""

import gc
import os
import sys

import ml_dtypes
import numpy as np
import pytest

import ncrtl.nki as nki
from ncrtl.kernels import load_file
from ncrtl.model.kernel import build
from ncrtl.model.kernel import timing as ktiming

LINEAR = os.path.join(os.path.dirname(__file__), "kernels", "linear.py")

#: (kernel, n, core version): n past each kernel's start-up, 4n still about a second for all.
CASES = [("tiles", 64, "v3"), ("in_place", 100, "v2"), ("columns", 150, "v3")]


def _inputs(name):
    rng = np.random.default_rng(0)
    if name == "tiles":
        return [
            rng.standard_normal((128, 256)).astype(ml_dtypes.bfloat16),
            rng.standard_normal((128, 2048)).astype(ml_dtypes.bfloat16),
        ]
    return [rng.standard_normal((128, 512 if name == "in_place" else 64)).astype(np.float32)]


def _work(name, n, core):
    """``(instructions, {what: count})`` of tracing ``name`` at ``n`` and timing it with its
    Perfetto trace and report."""
    args = _inputs(name)
    build.work.reset()
    ktiming._Busy.visited = 0
    gc.collect()
    gc.disable()  # the objects left allocated, not when the collector last ran
    try:
        blocks = sys.getallocatedblocks()
        program = nki.trace(load_file(LINEAR, name), args, {"n": n}, core=core)
        report = ktiming.simulate(program, trace=True)
        report.summary()
        events = sum(1 for _ in report.trace.events())
        held = sys.getallocatedblocks() - blocks
    finally:
        gc.enable()
    counts = {
        "placement steps": build.work.placement,
        "dependency map steps": build.work.semaphores,
        "timing events": report.events,
        "shared-resource spans visited": ktiming._Busy.visited,
        "trace events": events,
        "objects allocated": held,
    }
    return sum(program.counts().values()), counts


@pytest.mark.parametrize("name, n, core", CASES)
def test_work_per_instruction_stays_flat(name, n, core):
    small, counts = _work(name, n, core)
    big, counts4 = _work(name, 4 * n, core)
    assert big >= 3 * small
    grew = {
        what: (round(counts[what] / small, 2), round(counts4[what] / big, 2))
        for what in counts
        if counts4[what] / big > 1.1 * counts[what] / small
    }
    assert not grew, f"{name}: per instruction at {small} and {big} instructions: {grew}"


def _all_pairs(program):
    """The waits of every instruction by the rule as docs/kernels.md states it, each access
    compared with every earlier one: per stream, the latest earlier access of an overlapping
    box of the same tensor, one of the two a write; at a tensor's first use, every access of
    the tensors placed before where it is; not on its own compute engine; a wait an earlier
    one of the same stream implies left out."""
    core = program.core
    tensors = program.tensors

    def span(t):
        unit = build.ALIGN if t.space == "sbuf" else core.psum_bank_bytes
        return -(-max(t.partition_bytes, 1) // unit) * unit

    accesses = {}  # tensor -> [(stream, index, write, box)]
    implied, out = {}, {}
    for ins in program.instructions():
        need = {}
        ops = [(r, True) for r in ins.dsts] + [(r, False) for r in ins.srcs]
        for r, write in ops:
            t = tensors[r.tensor]
            if t.first == ins.seq and t.space != "hbm":
                for u in tensors.values():
                    if u.space == t.space and u.last < t.first and u.first >= 0:
                        if u.base < t.base + span(t) and t.base < u.base + span(u):
                            for s, i, _, _ in accesses.get(u.name, ()):
                                need[s] = max(need.get(s, 0), i + 1)
            box = r.extent()
            for s, i, w, b in accesses.get(r.tensor, ()):
                if (w or write) and b[0] < box[1] and box[0] < b[1]:
                    if b[2] < box[3] and box[2] < b[3]:
                        need[s] = max(need.get(s, 0), i + 1)
        for r, write in ops:
            accesses.setdefault(r.tensor, []).append((ins.engine, ins.index, write, r.extent()))
        if not ins.engine.startswith("dma"):
            need.pop(ins.engine, None)
        seen = implied.setdefault(ins.engine, {})
        out[(ins.engine, ins.index)] = tuple(
            (s, c) for s, c in sorted(need.items()) if c > seen.get(s, 0)
        )
        for s, c in out[(ins.engine, ins.index)]:
            seen[s] = c
    return out


@pytest.mark.parametrize("name, n, core", CASES)
def test_waits_are_the_all_pairs_rule(name, n, core):
    """The builder's maps of the latest accesses (a view's box list, the interval maps a
    tensor in many views turns into, the memories' maps of the tensors that were there) give
    the waits of comparing every access with every earlier one."""
    program = nki.trace(load_file(LINEAR, name), _inputs(name), {"n": n // 2}, core=core)
    want = _all_pairs(program)
    got = {(i.engine, i.index): i.waits for i in program.instructions()}
    assert got == want
    assert any(got.values())


def test_the_kernel_bench_times_every_phase_of_the_command(tmp_path):
    """``ncrtl bench --only kernel`` times ``ncrtl run`` through ``ncrtl.cli.main`` by its
    phases (ncrtl.cli.bench.kernel_command): each is reached, none twice, and they add up to no
    more than the command."""
    from ncrtl.cli.bench import kernel_command
    from ncrtl.testbench.bench import RUN_PHASES

    for timing_only in (True, False):
        argv = ["--example", "matmul_basic", "--trace", str(tmp_path / "t.json")]
        r = kernel_command(
            argv + ["--out", str(tmp_path / "out")] + ["--timing-only"] * timing_only
        )
        assert r["rc"] == 0 and r["instructions"] == 5
        assert set(r["phases"]) == set(RUN_PHASES)
        assert all(r["phases"][p] > 0 for p in RUN_PHASES if p != "golden" or not timing_only)
        assert (r["phases"]["golden"] == 0) == timing_only
        assert sum(r["phases"].values()) <= r["seconds"]


def test_a_dma_transfer_left_with_a_float_residue_completes():
    """Nine transfers sharing the DMA engines at 16/9 each once left one of them a float's
    residue of work, timed to complete 0 ticks later again and again: the timing run never
    ended (matmul_tiled at 2048 x 2048 x 8192).  Each completes, in a bounded number of
    events."""
    import heapq

    from ncrtl.model.event import Clock, EventCore

    starts = [(88, 109100), (409, 48735), (896, 199478), (945, 177432), (954, 90624)]
    starts += [(1882, 75965), (2030, 144929), (2279, 168374), (2577, 189698)]
    ev = EventCore([Clock("dma", 1400), Clock("tensor", 2400)])
    pool = ktiming._DmaPool(ev, 16)
    done = []
    for tick, work in starts:
        ev.at(tick, pool.submit, work, 16, lambda: done.append(ev.now))
    for _ in range(1000):  # EventCore.run, bounded
        if not ev._queue:
            break
        ev.now, _, callback, args = heapq.heappop(ev._queue)
        callback(*args)
    assert not ev._queue and len(done) == len(starts)
    assert done == sorted(done) and done[-1] >= sum(w for _, w in starts) / 16
