"""cocotb conformance of :class:`ncrtl.hdl.psum.psum.Psum` against the golden ``ncrtl.model.psum``.

A random program (``ncrtl.testbench.psum.program``) streams into every input of the RTL: write
instructions and their beats, requests on both engine ports, seed loads; both response ports
take their words with random backpressure.  A monitor samples the port activity every cycle and
feeds it to :class:`~ncrtl.testbench.psum.replay.Replay`, which replays the golden in the observed
grant order and checks ``o_grant`` against :class:`ncrtl.model.psum.Arbiter`, every handshake, every
engine read response, every error pulse (code and cycle), every group-complete event (bank and
cycle) and, through the final read-back, the whole memory.  The stall-free phases also check the
throughput: one TE beat per cycle, without a bubble, when no engine fights for its bank (also
when one address is hammered by N = 1 accumulations).
"""

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles

from ncrtl.model.psum.isa import Geometry, encode
from ncrtl.testbench.conformance import tb_settings
from ncrtl.testbench.psum.program import random_program, req_word, seed_word
from ncrtl.testbench.psum.replay import ENGINES, Latencies, Replay, Sample
from ncrtl.testbench.scoreboard import Scoreboard, write_counters
from ncrtl.testbench.stream import StreamBus, StreamSink, StreamSource, pack_lanes


class PsumTB:
    """Clock, reset, five stream sources (instructions, data, two engine request ports, seeds),
    two response sinks, and the monitor feeding the replay.

    Parameters
    ----------
    dut : cocotb handle
    geometry : Geometry
    stall : float
        Idle-cycle probability of the sources and backpressure probability of the sinks; each
        phase may override it (``Phase.stall``).
    seed : int
    """

    def __init__(self, dut, geometry, *, stall=0.0, seed=0):
        self.dut, self.g, self.stall = dut, geometry, stall
        Clock(dut.clk, 10, unit="ns").start()
        dut.rst.value = 1
        clk, rst = dut.clk, dut.rst
        self.bus = {
            name: StreamBus.from_prefix(dut, name)
            for name in (
                "instr",
                "data",
                "seed",
                *(f"{e}__{k}" for e in ENGINES for k in ("req", "resp")),
            )
        }
        self.instr = StreamSource(self.bus["instr"], clk, rst, stall=stall, seed=seed)
        self.data = StreamSource(self.bus["data"], clk, rst, stall=stall, seed=seed + 1)
        self.seed = StreamSource(self.bus["seed"], clk, rst, stall=stall, seed=seed + 2)
        self.req, self.resp = {}, {}
        for k, e in enumerate(ENGINES):
            self.req[e] = StreamSource(
                self.bus[f"{e}__req"], clk, rst, stall=stall, seed=seed + 3 + k
            )
            self.resp[e] = StreamSink(
                self.bus[f"{e}__resp"], clk, rst, backpressure=stall, seed=seed + 5 + k
            )
        self.replay = Replay(geometry, Latencies())
        self.resp_cycles = {e: [] for e in ENGINES}
        self._monitor = None

    @property
    def sources(self):
        return [self.instr, self.data, self.seed, *self.req.values()]

    def set_stall(self, p):
        for s in self.sources:
            s.stall = p
        for s in self.resp.values():
            s.backpressure = p

    async def reset(self, cycles=2):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, cycles)
        self.dut.rst.value = 0
        self._monitor = cocotb.start_soon(self._watch())

    async def _watch(self):
        """One :class:`Sample` per cycle: the values the flops see at the rising edge."""
        dut, replay, bus = self.dut, self.replay, self.bus
        edge = dut.clk.rising_edge
        iv, ir = bus["instr"].valid, bus["instr"].ready
        dv, dr = bus["data"].valid, bus["data"].ready
        sv = bus["seed"].valid
        grant, err, err_code = dut.o_grant, dut.error__valid, dut.error__code
        done, done_bank = dut.o_done, dut.o_done_bank
        ports = [
            (
                e,
                bus[f"{e}__req"].valid,
                bus[f"{e}__req"].ready,
                bus[f"{e}__resp"].valid,
                bus[f"{e}__resp"].ready,
                getattr(dut, f"{e}_error__valid"),
                getattr(dut, f"{e}_error__code"),
            )
            for e in ENGINES
        ]
        while True:
            await edge
            d_valid = int(dv.value)
            s = Sample(
                instr=bool(int(iv.value) and int(ir.value)),
                data_valid=bool(d_valid),
                data=bool(d_valid and int(dr.value)),
                seed=bool(int(sv.value)),
                grant=int(grant.value),
            )
            if int(err.value):
                s.error = int(err_code.value)
            if int(done.value):
                s.done = int(done_bank.value)
            for e, qv, qr, rv, rr, ee, ec in ports:
                valid = bool(int(qv.value))
                s.req_valid[e] = valid
                s.req_ready[e] = valid and bool(int(qr.value))
                taken = bool(int(rv.value) and int(rr.value))
                s.resp[e] = taken
                if taken:
                    self.resp_cycles[e].append(replay.cycle)
                if int(ee.value):
                    s.eng_error[e] = int(ec.value)
            replay.step(s)

    def send(self, phase):
        """Queue every stream of a phase."""
        P = self.g.partitions
        self.set_stall(self.stall if phase.stall is None else phase.stall)
        r = self.replay
        r.add_writes(phase.writes)
        for e in ENGINES:
            reqs = getattr(phase, e)
            r.add_requests(e, reqs, tag="final" if phase.name == "readback" else "read")
            self.req[e].send([req_word(q, P) for q in reqs])
        r.add_seeds(phase.seeds)
        self.seed.send([seed_word(p, w) for p, w in phase.seeds])
        self.instr.send([encode(w) for w, _ in phase.writes])
        beats = [b for w, b in phase.writes if w.n]
        if beats:
            self.data.send(pack_lanes(np.concatenate(beats), 32))

    def _progress(self):
        return (
            self.instr.sent,
            self.data.sent,
            self.seed.sent,
            *(self.req[e].sent for e in ENGINES),
            *(self.resp[e].count for e in ENGINES),
        )

    async def drain(self, patience=2000):
        """Wait until every queued word is taken, every response received and every pulse due;
        raise if nothing moves for ``patience`` cycles (a lost response, a hung stream)."""
        r = self.replay
        last, still = None, 0
        while True:
            await self.dut.clk.rising_edge
            if (
                all(s.idle for s in self.sources)
                and r.idle
                and all(self.resp[e].count == len(r.want_resp[e]) for e in ENGINES)
            ):
                break
            now = self._progress()
            still = still + 1 if now == last else 0
            last = now
            if still >= patience:
                names = (
                    "instr",
                    "data",
                    "seed",
                    *(f"{e}.req" for e in ENGINES),
                    *(f"{e}.resp" for e in ENGINES),
                )
                want = (
                    len(r.instrs),
                    len(r.beats) + sum(len(c) for c in r._beat_chunks),
                    len(r.seeds),
                    *(len(r.reqs[e]) for e in ENGINES),
                    *(len(r.want_resp[e]) for e in ENGINES),
                )
                state = ", ".join(f"{n} {g}/{w}" for n, g, w in zip(names, now, want))
                raise TimeoutError(f"PSUM stopped: no progress for {patience} cycles ({state})")
        await ClockCycles(self.dut.clk, 8)  # o_done / error pulses land


def _span(cycles):
    """Cycles from the first to the last event, inclusive."""
    return cycles[-1] - cycles[0] + 1 if cycles else 0


async def run_program(dut, prog, *, stall, seed):
    tb = PsumTB(dut, prog.geometry, stall=stall, seed=seed)
    await tb.reset()
    r = tb.replay
    rate = Scoreboard("psum.full_rate", "cycles for n beats", bits=32)
    counters = {}
    for phase in prog.phases:
        beats0 = len(r.te_beats)
        grants0 = {p: len(v) for p, v in r.grant_cycles.items()}
        done0 = len(r.got_done)
        resp0 = {e: len(tb.resp_cycles[e]) for e in ENGINES}
        tb.send(phase)
        await tb.drain()
        beats = r.te_beats[beats0:]
        grants = {p: v[grants0[p] :] for p, v in r.grant_cycles.items()}
        if phase.full_rate:
            # One beat per cycle, no bubble, from the first beat of the phase to the last.
            rate.compare(np.array([_span(beats)]), np.array([len(beats)]))
            counters[f"{phase.name}_beats"] = len(beats)
            counters[f"{phase.name}_cycles"] = _span(beats)
        if phase.name == "latency" and r.got_done[done0:]:
            counters["latency_done"] = r.got_done[done0][0] - grants["te"][0]
        if phase.name == "latency_read" and tb.resp_cycles["ve"][resp0["ve"] :]:
            counters["latency_read"] = tb.resp_cycles["ve"][resp0["ve"]] - grants["ve"][0]
        if phase.name == "contention":
            lo = min(grants["te"][0], grants["ve"][0])
            hi = max(grants["te"][-1], grants["ve"][-1])
            # The window where both compete: up to the first one to finish.
            end = min(grants["te"][-1], grants["ve"][-1])
            counters["contention_cycles"] = end - lo + 1
            counters["contention_te"] = sum(lo <= c <= end for c in grants["te"])
            counters["contention_ve"] = sum(lo <= c <= end for c in grants["ve"])
            counters["contention_span"] = hi - lo + 1
    boards = r.finish({e: tb.resp[e].words for e in ENGINES}) + [rate]
    for b in boards:
        b.write_json()
        dut._log.info(b.report())
    write_counters(cycles=r.cycle, te_beats=len(r.te_beats), **counters)
    dut._log.info(f"counters: {counters}")
    for b in boards:
        b.assert_clean()
    return counters


def _program(seed, salt):
    params, count, _, _ = tb_settings()
    g = Geometry(params["partitions"], params["banks"], params["bank_bytes"])
    rng = np.random.default_rng(seed * 7919 + salt)
    return random_program(rng, g, beats=max(50, count))


@cocotb.test()
async def test_program(dut):
    """Every phase of the program; the random and read-back phases with random stalls and
    backpressure (``NCRTL_STALL``), the others stall-free."""
    params, count, seed, stall = tb_settings()
    await run_program(dut, _program(seed, 1), stall=stall, seed=seed)
