"""Amaranth-simulator driver of :class:`ncrtl.hdl.psum.psum.Psum` for the unit tests.

:func:`run_phases` streams program phases (``ncrtl.testbench.psum.program``) into the RTL with the same
stall / backpressure rules as the cocotb testbench and feeds every cycle to the same
:class:`~ncrtl.testbench.psum.replay.Replay`.
"""

import numpy as np
from amaranth.sim import Simulator

from ncrtl.model.psum.isa import encode
from ncrtl.testbench.psum.program import req_word, seed_word
from ncrtl.testbench.psum.replay import ENGINES, Latencies, Replay, Sample

__all__ = ["run_phases", "lanes", "unlanes"]


def lanes(words):
    return sum(int(w) << (32 * i) for i, w in enumerate(words))


def unlanes(value, n):
    return np.array([(value >> (32 * i)) & 0xFFFFFFFF for i in range(n)], dtype=np.uint32)


class _Source:
    def __init__(self, rng):
        self.words, self.k, self.rng, self.stall = [], 0, rng, 0.0
        self.valid = False

    def present(self):
        """Decide this cycle's valid (a presented word stays until taken)."""
        if not self.valid and self.k < len(self.words):
            self.valid = not (self.stall and self.rng.random() < self.stall)
        return self.valid

    def word(self):
        return self.words[self.k] if self.k < len(self.words) else 0

    def taken(self):
        self.k += 1
        self.valid = False

    @property
    def idle(self):
        return self.k == len(self.words)


def run_phases(dut, phases, *, stall=0.0, seed=0, max_cycles=100000):
    """Run ``phases`` through ``dut`` (one simulation, phase after phase, each drained); return
    ``(replay, responses, boards, info)``: ``info`` has per phase the TE beat cycles."""
    g = dut.geometry
    P = g.partitions
    rng = np.random.default_rng(seed)
    replay = Replay(g, Latencies.of(dut))
    src = {n: _Source(rng) for n in ("instr", "data", "seed", *ENGINES)}
    responses = {e: [] for e in ENGINES}
    info = {}

    async def bench(ctx):
        for phase in phases:
            p = stall if phase.stall is None else phase.stall
            for s in src.values():
                s.stall = p
            replay.add_writes(phase.writes)
            src["instr"].words += [encode(w) for w, _ in phase.writes]
            src["data"].words += [lanes(b) for w, beats in phase.writes for b in beats[: w.n]]
            replay.add_seeds(phase.seeds)
            src["seed"].words += [seed_word(q, w) for q, w in phase.seeds]
            for e in ENGINES:
                reqs = getattr(phase, e)
                replay.add_requests(e, reqs, "final" if phase.name == "readback" else "read")
                src[e].words += [req_word(q, P) for q in reqs]
            beats0 = len(replay.te_beats)
            quiet = 0
            for _ in range(max_cycles):
                iv, dv, sv = src["instr"].present(), src["data"].present(), src["seed"].present()
                ctx.set(dut.instr.valid, iv)
                ctx.set(dut.instr.payload.as_value(), src["instr"].word())
                ctx.set(dut.data.valid, dv)
                ctx.set(dut.data.payload.data, src["data"].word())
                ctx.set(dut.seed.valid, sv)
                ctx.set(dut.seed.payload.as_value(), src["seed"].word())
                ready = {}
                for e in ENGINES:
                    req, resp = getattr(dut, e).req, getattr(dut, e).resp
                    ctx.set(req.valid, src[e].present())
                    ctx.set(req.payload.as_value(), src[e].word())
                    ready[e] = not (p and rng.random() < p)
                    ctx.set(resp.ready, ready[e])
                s = Sample(
                    instr=iv and bool(ctx.get(dut.instr.ready)),
                    data_valid=dv,
                    data=dv and bool(ctx.get(dut.data.ready)),
                    seed=sv and bool(ctx.get(dut.seed.ready)),
                    grant=ctx.get(dut.o_grant),
                )
                if ctx.get(dut.error.valid):
                    s.error = ctx.get(dut.error.code)
                if ctx.get(dut.o_done):
                    s.done = ctx.get(dut.o_done_bank)
                for e in ENGINES:
                    v = src[e].valid
                    s.req_valid[e] = v
                    req, resp = getattr(dut, e).req, getattr(dut, e).resp
                    s.req_ready[e] = v and bool(ctx.get(req.ready))
                    s.resp[e] = ready[e] and bool(ctx.get(resp.valid))
                    if s.resp[e]:
                        responses[e].append(ctx.get(resp.payload))
                    if ctx.get(getattr(dut, f"{e}_error").valid):
                        s.eng_error[e] = ctx.get(getattr(dut, f"{e}_error").code)
                replay.step(s)
                for name, flag in (("instr", s.instr), ("data", s.data), ("seed", s.seed)):
                    if flag:
                        src[name].taken()
                for e in ENGINES:
                    if s.req_ready[e]:
                        src[e].taken()
                await ctx.tick()
                done = (
                    all(x.idle for x in src.values())
                    and replay.idle
                    and all(len(responses[e]) == len(replay.want_resp[e]) for e in ENGINES)
                )
                quiet = quiet + 1 if done else 0
                if quiet > 8:
                    break
            else:
                raise TimeoutError(f"phase {phase.name} did not drain")
            info[phase.name] = replay.te_beats[beats0:]

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    boards = replay.finish(responses)
    return replay, responses, boards, info
