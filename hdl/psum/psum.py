"""``Psum``: the PSUM top: bank memories, read-add-write pipelines, forwarding, engine ports.

Ports (all synchronous to ``clk``, reset ``rst``; ``P`` = partitions).  Each stream ``x`` is an
:class:`amaranth.lib.stream.Signature` with the Verilog ports ``x__valid``, ``x__ready`` and
``x__payload``:

===================  ===================  ========================================================
port                 payload / width      meaning
===================  ===================  ========================================================
``instr``            32                   in: write instructions, ``isa.encode`` words
``data``             ``vector_layout(P)`` in: Tensor Engine output vectors, partition ``p`` in
                                          bits ``[32p, 32p + 32)`` of ``data`` (``last`` unread)
``error``            ``ErrorStrobe(4)``   ``valid`` pulses when a taken instruction broke a rule,
                                          ``code`` its ``isa.Error``
``o_done``           1                    pulse: group complete (last beat of a legal bit1 write
                                          written)
``o_done_bank``      4                    its bank
``{e}``              ``PsumPort(P)``      engine ``e`` in ``ve``, ``se`` (``In``: the engine's
                                          side flipped): ``{e}.req`` in, requests of 18+32*P
                                          bits, LSB first: ``we`` 1, ``mask`` 2, ``bank`` 4,
                                          ``row`` 11, ``data`` 32*P (:data:`REQ_FIELDS`);
                                          ``{e}.resp`` out, read responses in request order
                                          (zeros for a bad read)
``{e}_error``        ``ErrorStrobe(2)``   a taken request had a bad bank or row: ``code`` 1
                                          bank, 2 row
``seed``             200                  in: generator state loads (always ready), LSB first:
                                          ``partition`` 8, then ``x, y, z, w, v, d`` 32 each
``o_grant``          3                    bit0 TE, bit1 VE, bit2 SE granted a bank this cycle
===================  ===================  ========================================================
"""

from amaranth.hdl import Cat, ClockSignal, Instance, Module, Mux, ResetSignal, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out, connect, flipped

from ncrtl.hdl.common.bits import equals
from ncrtl.hdl.common.params import check_bool, validated_init
from ncrtl.hdl.common.ports import ErrorStrobe
from ncrtl.hdl.common.stream import vector_layout
from ncrtl.hdl.fp.xorwow import STATE_WORDS, Xorwow
from ncrtl.hdl.verilog import Cell
from ncrtl.model.fp.xorwow import Xorwow as ModelXorwow
from ncrtl.model.psum.arbiter import PORTS
from ncrtl.model.psum.isa import Dtype, Geometry

from .arbiter import BankArbiter
from .bank import BankMemory, place_bank
from .control import INSTR_LAYOUT, WriteControl
from .update import SlotUpdate

__all__ = [
    "Psum",
    "PsumPort",
    "REQ_FIELDS",
    "SEED_FIELDS",
    "ENGINES",
    "req_layout",
    "seed_layout",
    "SLOT_MODULE",
    "SYNTH_SRAM_BITS",
    "bank_module",
    "planar",
    "interleaved",
]

#: Largest bank memory (bits) the synthesis view synthesizes; larger ones are SRAM macros
#: (:meth:`Psum.cells`).
SYNTH_SRAM_BITS = 1 << 16

#: Verilog module name of :class:`~ncrtl.hdl.psum.update.SlotUpdate` (one per partition).
SLOT_MODULE = "psum_slot"


def bank_module(partitions, rows):
    """Verilog module name of the :class:`~ncrtl.hdl.psum.bank.BankMemory` of a geometry."""
    return f"psum_bank_{32 * partitions}x{rows}"


#: Engine request word, LSB first: (field, width); ``data`` is ``32 * partitions`` wide.
REQ_FIELDS = (("we", 1), ("mask", 2), ("bank", 4), ("row", 11), ("data", None))

#: Seed word, LSB first: the partition, then the six XORWOW state words.
SEED_FIELDS = (("partition", 8),) + tuple((w, 32) for w in STATE_WORDS)

#: The engine ports, in ``o_grant`` order after the Tensor Engine.
ENGINES = PORTS[1:]

_TE = 0


def req_layout(partitions):
    """The :class:`~amaranth.lib.data.StructLayout` of ``{e}.req`` for ``partitions``."""
    return data.StructLayout({n: (w if w is not None else 32 * partitions) for n, w in REQ_FIELDS})


class PsumPort(wiring.Signature):
    """An engine's PSUM port, seen from the engine: requests (:func:`req_layout`) out, read
    responses (one 32-bit slot per partition, in request order) in.  :class:`Psum` takes one
    per engine as ``In(PsumPort(partitions))``."""

    def __init__(self, partitions):
        self.partitions = partitions
        super().__init__(
            {
                "req": Out(stream.Signature(req_layout(partitions))),
                "resp": In(stream.Signature(32 * partitions)),
            }
        )

    def __eq__(self, other):
        return isinstance(other, PsumPort) and other.partitions == self.partitions

    def __hash__(self):
        return hash((PsumPort, self.partitions))


def seed_layout():
    return data.StructLayout(dict(SEED_FIELDS))


def planar(word, partitions):
    """A word of slots (partition ``p`` in bits ``[32p, 32p + 32)``, the port layout) as the
    memory stores it: every partition's low half, then every partition's high half (wiring)."""
    P = partitions
    return Cat(
        *(word[32 * p : 32 * p + 16] for p in range(P)),
        *(word[32 * p + 16 : 32 * p + 32] for p in range(P)),
    )


def interleaved(word, partitions):
    """The inverse of :func:`planar`."""
    P, H = partitions, 16 * partitions
    return Cat(
        *(Cat(word[16 * p : 16 * p + 16], word[H + 16 * p : H + 16 * p + 16]) for p in range(P))
    )


def _check_geometry(partitions, banks, bank_bytes):
    try:
        return Geometry(partitions, banks, bank_bytes)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"Psum {exc}") from None


class Psum(wiring.Component):
    """PSUM: ``partitions x banks`` banks of ``bank_bytes`` with a read-add-write unit.

    The contract is docs/psum.md; the ports are in the module docstring.  Every access behaves
    as if it happened atomically in the cycle it is granted, in grant order.

    Microarchitecture
    -----------------
    * One :class:`~amaranth.lib.memory.Memory` per bank (:class:`~ncrtl.hdl.psum.bank.BankMemory`):
      ``32 * partitions`` bits wide (memory word ``(bank, row)`` holds every partition's slot),
      ``rows`` deep, one synchronous read port, one write port with 16-bit write granularity
      (half-slot writes).  Words are stored as two half planes, every partition's low half then
      every high half (:func:`planar`), so that forwarding a half is one multiplexer; the ports
      keep the partition-major layout.
    * Three requesters, TE (the write stream), VE and SE (the engine ports), arbitrated per bank
      by :class:`~ncrtl.hdl.psum.arbiter.BankArbiter`; up to three accesses per cycle to different banks.
    * One pipeline per requester, four stages: **G** (cycle ``t``: granted, memory read
      address), **F** (``t + 1``: read data, forwarded), **E** (``t + 2``: forwarded again,
      add+round, engine read response), **W** (``t + 3``: memory write).  A fifth register
      stage **S** keeps the word written in the previous cycle for forwarding.
    * Forwarding, per 16-bit half: the read port returns the memory as it was before the write
      of the cycle the address was presented, so at F the accesses in S and W (written in cycles
      ``t`` and ``t + 1``) are forwarded, and at E the access in W (granted in ``t - 1``, computed
      while this one was in F).  Every source is a register, from every requester's pipeline;
      accesses in one stage were granted in one cycle, so at most one of them matches a given
      address.  The loop W register -> E operand -> add+round -> W register is one cycle:
      hammering one address with accumulations every cycle runs at full rate.
    * :class:`~ncrtl.hdl.psum.update.SlotUpdate` per partition: combinational add and BF16 rounding,
      one output register (the W stage).
    * :class:`~ncrtl.hdl.psum.control.WriteControl`: in-order instructions, rules, group state, a
      prefetched next write.
    * One :class:`~ncrtl.hdl.fp.xorwow.Xorwow` per partition (reset state ``seed_state(p)``), all
      stepped in the cycle an SR beat is granted; the draw is captured at F.  A seed loaded in
      the same cycle as an SR beat is granted is loaded first (the beat draws from it).
    * Engine ports: a read response FIFO of :attr:`resp_depth` entries per port and a credit
      counter (reads taken and not yet answered); a read request is only taken while the count
      is below the depth, so response backpressure never loses data.  Writes need no credit.

    Parameters
    ----------
    partitions, banks, bank_bytes : int
        The geometry (:class:`ncrtl.model.psum.isa.Geometry`); the hardware is 128 x 8 x 2048.
    instance : bool
        Place the slot units and bank memories as Verilog instances of one module each (True,
        for Verilog generation, see :meth:`cells`: the full size generates in seconds) or as
        Amaranth submodules (False, for the Amaranth simulator).

    Attributes
    ----------
    geometry : Geometry
    raw_latency : int
        3: a beat or engine write granted in cycle ``t`` is written to memory at the end of
        cycle ``t + 3`` (later accesses see it earlier, through forwarding).
    read_latency : int
        3: an engine read granted (or a bad read taken) in cycle ``t`` responds from cycle
        ``t + 3`` on (``o_{e}_valid``), when no earlier response waits.
    done_latency : int
        4: ``o_done`` pulses in cycle ``t + 4`` for a last beat granted in cycle ``t``.
    error_latency : int
        1: ``error`` (``{e}_error``) pulses the cycle after the instruction (request) is taken.
    resp_depth : int
        4: read responses (taken reads) in flight per engine port; with ``o_{e}_ready`` held high
        reads are taken every cycle.
    """

    raw_latency = 3
    read_latency = 3
    done_latency = 4
    error_latency = 1
    resp_depth = 4

    @validated_init
    def __init__(self, partitions=128, banks=8, bank_bytes=2048, *, instance=False):
        self.geometry = _check_geometry(partitions, banks, bank_bytes)
        self.instance = check_bool(instance, "Psum instance")
        g = self.geometry
        self.partitions, self.banks, self.bank_bytes, self.rows = (
            g.partitions,
            g.banks,
            g.bank_bytes,
            g.rows,
        )
        self.req_layout = req_layout(g.partitions)
        self.seed_layout = seed_layout()
        members = {
            "instr": In(stream.Signature(INSTR_LAYOUT)),
            "data": In(stream.Signature(vector_layout(g.partitions))),
            "error": Out(ErrorStrobe(4)),
            "o_done": Out(1),
            "o_done_bank": Out(4),
        }
        for e in ENGINES:
            members.update(
                {
                    e: In(PsumPort(g.partitions)),
                    f"{e}_error": Out(ErrorStrobe(2)),
                }
            )
        members.update(
            {
                "seed": In(stream.Signature(self.seed_layout)),
                "o_grant": Out(len(PORTS)),
            }
        )
        super().__init__(members)

    def __repr__(self):
        g = self.geometry
        return f"Psum({g.partitions}, {g.banks}, {g.bank_bytes})"

    def cells(self):
        """The modules PSUM places with ``Instance`` (:class:`ncrtl.hdl.verilog.Cell`; none with
        ``instance=False``): the slot unit (:data:`SLOT_MODULE`) and the bank memory
        (:func:`bank_module`).  A bank of more than :data:`SYNTH_SRAM_BITS` bits is a
        ``macro``: the synthesis view declares it as a blackbox, the SRAM macro of a real flow
        (Yosys would build it from flip-flops: 2 Mbit at 16 x 8 x 2 KiB).  The bank module itself
        is synthesized in the smaller geometries."""
        if not self.instance:
            return []
        width, rows = 32 * self.partitions, self.rows
        return [
            Cell(SLOT_MODULE, SlotUpdate),
            Cell(
                bank_module(self.partitions, rows),
                lambda: BankMemory(width, rows),
                macro=width * rows > SYNTH_SRAM_BITS,
            ),
        ]

    def elaborate(self, platform):
        m = Module()
        m.submodules.control = ctl = WriteControl(self.geometry)
        m.submodules.arbiter = arb = BankArbiter(self.banks)
        connect(m, flipped(self.instr), ctl.instr)
        connect(m, flipped(self.data), ctl.data)
        m.d.comb += [
            self.error.valid.eq(ctl.o_error),
            self.error.code.eq(ctl.o_error_code),
            self.o_grant.eq(arb.o_grant),
        ]
        p = _Pipeline(self.geometry)
        banks = [_Port(self._bank(m, b)) for b in range(self.banks)]
        # The TE's W word is the slot units' output register.
        m.submodules.update = update = _Updates(self.partitions, self.instance)
        p.w[_TE]["wdata"] = Signal(32 * self.partitions, name="w_te_wdata")
        m.d.comb += p.w[_TE]["wdata"].eq(planar(update.o_word, self.partitions))
        rng = self._generators(m, ctl)
        fifos = self._grant(m, p, ctl, arb, banks)
        self._read(m, p, banks, rng)
        self._compute(m, p, update, fifos)
        self._write(m, p, banks)
        return m

    def _grant(self, m, p, ctl, arb, banks):
        """G (cycle ``t``): the TE write stream and the engine requests ask for banks, the
        arbiter grants, the granted requester of each bank presents its read address.  Returns
        the engines' response FIFOs."""
        P, B, R = self.partitions, self.banks, self.rows
        W = 32 * P
        present, bank_g, row_g, grant = p.present, p.bank_g, p.row_g, p.grant
        m.d.comb += [
            arb.i_present.eq(Cat(*present)),
            arb.i_bank.eq(Cat(*bank_g)),
            Cat(*grant).eq(arb.o_grant),
        ]

        # TE: the write stream.
        fp32 = equals(ctl.o_dtype, Dtype.FP32)
        te_mask = Signal(2, name="te_mask")
        f, te_f = p.f[_TE], p.te_f
        m.d.comb += [
            ctl.i_grant.eq(grant[_TE]),
            present[_TE].eq(ctl.o_present),
            bank_g[_TE].eq(ctl.o_bank),
            # FP32 element c is word c; a 16-bit element c is half c % 2 of word c // 2.
            row_g[_TE].eq(Mux(fp32, ctl.o_elem, ctl.o_elem >> 1)),
            te_mask.eq(Mux(fp32, 0b11, Mux(ctl.o_elem[0], 0b10, 0b01))),
        ]
        m.d.sync += [
            f["valid"].eq(grant[_TE]),
            f["bank"].eq(bank_g[_TE]),
            f["row"].eq(row_g[_TE]),
            f["mask"].eq(te_mask),
            f["read"].eq(0),
            f["bad"].eq(0),
            f["data"].eq(self.data.payload.data),
            te_f["dtype"].eq(ctl.o_dtype),
            te_f["half"].eq(ctl.o_elem[0]),
            te_f["overwrite"].eq(ctl.o_overwrite),
            te_f["sr"].eq(ctl.o_sr),
            te_f["done"].eq(ctl.o_done),
        ]

        # Engines: plain SRAM requests.
        depth = self.resp_depth
        fifos = {}
        for i, name in enumerate(ENGINES, start=1):
            port = getattr(self, name)
            stream_in, stream_out = port.req, port.resp
            req = stream_in.payload
            bad_bank = Signal(name=f"{name}_bad_bank")
            bad_row = Signal(name=f"{name}_bad_row")
            ok = Signal(name=f"{name}_ok")
            credits = Signal(range(depth + 1), name=f"{name}_in_flight")
            can = Signal(name=f"{name}_can")  # a write, or a read with a free response slot
            taken = Signal(name=f"{name}_taken")
            m.d.comb += [
                bad_bank.eq(req.bank >= B),
                bad_row.eq(req.row >= R),
                ok.eq(~bad_bank & ~bad_row),
                can.eq(req.we | (credits < depth)),
                present[i].eq(stream_in.valid & ok & can),
                bank_g[i].eq(req.bank),
                row_g[i].eq(req.row),
                # A bad request touches no bank: taken without arbitration (a read still needs
                # a response slot, for its zeros).
                stream_in.ready.eq(Mux(ok, grant[i], can)),
                taken.eq(stream_in.valid & stream_in.ready),
            ]
            f = p.f[i]
            m.d.sync += [
                getattr(self, f"{name}_error").valid.eq(taken & ~ok),
                getattr(self, f"{name}_error").code.eq(Mux(bad_bank, 1, 2)),
                f["valid"].eq(taken),
                f["bank"].eq(req.bank),
                f["row"].eq(req.row),
                f["mask"].eq(Mux(req.we & ok, req.mask, 0)),
                f["read"].eq(~req.we),
                f["bad"].eq(~ok),
                f["data"].eq(planar(req.data, P)),
            ]
            m.submodules[f"{name}_responses"] = fifo = SyncFIFO(width=W, depth=depth)
            fifos[i] = fifo
            popped = fifo.r_rdy & fifo.r_en
            m.d.sync += credits.eq(credits + (taken & ~req.we) - popped)
            m.d.comb += [
                stream_out.valid.eq(fifo.r_rdy),
                stream_out.payload.eq(fifo.r_data),
                fifo.r_en.eq(stream_out.ready),
            ]

        # Read ports: the requester granted each bank presents its row.
        for b in range(B):
            mem = banks[b]
            sel = [grant[i] & equals(bank_g[i], b) for i in p.lanes]
            m.d.comb += mem.ren.eq(Cat(*sel).any())
            with m.If(sel[0]):
                m.d.comb += mem.raddr.eq(row_g[0])
            for i in p.lanes[1:]:
                with m.Elif(sel[i]):
                    m.d.comb += mem.raddr.eq(row_g[i])
        return fifos

    def _forward(self, m, base, bank, row, sources, name):
        """``base`` (a planar word) with every matching source's halves laid over it, oldest
        source first: per half plane, one multiplexer per source."""
        H = 16 * self.partitions
        lo, hi = base[:H], base[H:]
        for k, src in enumerate(sources):
            hit = Signal(name=f"{name}_hit{k}")
            nlo = Signal(H, name=f"{name}_lo{k}")
            nhi = Signal(H, name=f"{name}_hi{k}")
            m.d.comb += [
                hit.eq(src["valid"] & (src["bank"] == bank) & (src["row"] == row)),
                nlo.eq(Mux(hit & src["mask"][0], src["wdata"][:H], lo)),
                nhi.eq(Mux(hit & src["mask"][1], src["wdata"][H:], hi)),
            ]
            lo, hi = nlo, nhi
        return Cat(lo, hi)

    def _read(self, m, p, banks, rng):
        """F (cycle ``t + 1``): the read data, forwarded from S (written last cycle) and W
        (written this cycle); the SR draw of a beat granted at G."""
        W = 32 * self.partitions
        f, e, s, w = p.f, p.e, p.s, p.w
        for i in p.lanes:
            rd = Signal(W, name=f"f_{PORTS[i]}_rd")
            with m.Switch(f[i]["bank"]):
                for b in range(self.banks):
                    with m.Case(b):
                        m.d.comb += rd.eq(banks[b].rdata)
                with m.Default():
                    m.d.comb += rd.eq(0)  # a bad engine request's bank
            old = self._forward(m, rd, f[i]["bank"], f[i]["row"], s + w, f"f_{PORTS[i]}_fwd")
            m.d.sync += [e[i][k].eq(f[i][k]) for k in f[i]]
            m.d.sync += e[i]["old"].eq(old)
        m.d.sync += [p.te_e[k].eq(p.te_f[k]) for k in p.te_f]
        # The draw of an SR beat granted at G: the generators stepped at its grant.
        m.d.sync += p.te_e["rand"].eq(Cat(*(x.o_value[16:] for x in rng)))

    def _compute(self, m, p, update, fifos):
        """E (cycle ``t + 2``): forwarded once more from W (the access one cycle ahead); the
        TE beat is added and rounded (:class:`SlotUpdate`), an engine read answered."""
        P = self.partitions
        e, w, te_e = p.e, p.w, p.te_e
        for i in p.lanes:
            old = self._forward(m, e[i]["old"], e[i]["bank"], e[i]["row"], w, f"e_{PORTS[i]}_fwd")
            if i == _TE:
                m.d.comb += [
                    update.i_old.eq(interleaved(old, P)),
                    update.i_value.eq(e[i]["data"]),
                    update.i_dtype.eq(te_e["dtype"]),
                    update.i_half.eq(te_e["half"]),
                    update.i_overwrite.eq(te_e["overwrite"]),
                    update.i_sr.eq(te_e["sr"]),
                    update.i_rand.eq(te_e["rand"]),
                ]
                m.d.sync += p.w_te_done.eq(e[i]["valid"] & te_e["done"])
            else:
                fifo = fifos[i]
                resp = Signal(32 * P, name=f"e_{PORTS[i]}_resp")
                m.d.comb += [
                    resp.eq(Mux(e[i]["bad"], 0, old)),
                    fifo.w_en.eq(e[i]["valid"] & e[i]["read"]),
                    fifo.w_data.eq(interleaved(resp, P)),
                ]
                m.d.sync += w[i]["data"].eq(e[i]["data"])
            m.d.sync += [w[i][k].eq(e[i][k]) for k in ("valid", "bank", "row", "mask")]

    def _write(self, m, p, banks):
        """W (cycle ``t + 3``): the memory writes; S keeps each one more cycle (forwarding);
        the group-complete event."""
        P = self.partitions
        w, s = p.w, p.s
        for b in range(self.banks):
            mem = banks[b]
            sel = [w[i]["valid"] & equals(w[i]["bank"], b) & w[i]["mask"].any() for i in p.lanes]
            for i in p.lanes:
                with (m.If if i == 0 else m.Elif)(sel[i]):
                    m.d.comb += [
                        mem.waddr.eq(w[i]["row"]),
                        mem.wdata.eq(w[i]["wdata"]),
                        mem.wen.eq(Cat(w[i]["mask"][0].replicate(P), w[i]["mask"][1].replicate(P))),
                    ]
        for i in p.lanes:
            m.d.sync += [
                s[i]["valid"].eq(w[i]["valid"]),
                s[i]["bank"].eq(w[i]["bank"]),
                s[i]["row"].eq(w[i]["row"]),
                s[i]["mask"].eq(w[i]["mask"]),
                s[i]["data"].eq(w[i]["wdata"]),
            ]
        m.d.sync += [
            self.o_done.eq(w[_TE]["valid"] & p.w_te_done),
            self.o_done_bank.eq(w[_TE]["bank"]),
        ]

    def _generators(self, m, ctl):
        """One XORWOW generator per partition (the stochastic-rounding draws), stepped at the
        grant of an SR beat; ``seed`` loads one (always ready)."""
        rng = []
        for part in range(self.partitions):
            rng.append(Xorwow(init=ModelXorwow.seed_state(part)))
            m.submodules[f"rng{part}"] = rng[-1]
        seed = self.seed.payload
        step = Signal(name="rng_step")
        m.d.comb += [step.eq(ctl.i_grant & ctl.o_sr), self.seed.ready.eq(1)]
        for part, x in enumerate(rng):
            m.d.comb += [
                x.i_next.eq(step),
                x.i_load.eq(self.seed.valid & equals(seed.partition, part)),
                x.i_state.eq(Cat(*(getattr(seed, n) for n in STATE_WORDS))),
            ]
        return rng

    def _bank(self, m, b):
        """Place bank ``b``'s memory; return its port signals (a dict)."""
        g = self.geometry
        W, R = 32 * g.partitions, g.rows
        module = bank_module(g.partitions, R) if self.instance else None
        return place_bank(m, f"bank{b}", W, R, module=module)


class _Pipeline:
    """The access records of the read-add-write pipeline: one per stage (F, E, W, S) and
    requester (TE, VE, SE), the TE's extras, and the G-stage request signals."""

    def __init__(self, geometry):
        P, R = geometry.partitions, geometry.rows
        W = 32 * P
        row_bits = max(1, (R - 1).bit_length())
        self.lanes = range(len(PORTS))

        def record(stage, lane):
            name = f"{stage}_{PORTS[lane]}_"
            return dict(
                valid=Signal(name=name + "valid"),
                bank=Signal(4, name=name + "bank", reset_less=True),
                row=Signal(row_bits, name=name + "row", reset_less=True),
                mask=Signal(2, name=name + "mask", reset_less=True),  # halves it writes
                read=Signal(name=name + "read", reset_less=True),  # engine read: responds
                bad=Signal(name=name + "bad", reset_less=True),  # bad request: zeros
                # TE: the beat (port layout); engine: the write data (planar)
                data=Signal(W, name=name + "data", reset_less=True),
            )

        self.f = [record("f", i) for i in self.lanes]
        self.e = [record("e", i) for i in self.lanes]
        self.w = [record("w", i) for i in self.lanes]
        self.s = [record("s", i) for i in self.lanes]
        for i in self.lanes:
            self.e[i]["old"] = Signal(W, name=f"e_{PORTS[i]}_old", reset_less=True)
            del self.w[i]["read"], self.w[i]["bad"], self.s[i]["read"], self.s[i]["bad"]
            if i != _TE:  # what an engine's W stage writes: its data
                self.w[i]["wdata"] = self.w[i]["data"]
            self.s[i]["wdata"] = self.s[i]["data"]
        del self.w[_TE]["data"]  # the TE's W word is the SlotUpdate output register
        # TE extras: how the beat combines with the slot.
        self.te_f = dict(
            dtype=Signal(2, name="f_te_dtype", reset_less=True),
            half=Signal(name="f_te_half", reset_less=True),
            overwrite=Signal(name="f_te_overwrite", reset_less=True),
            sr=Signal(name="f_te_sr", reset_less=True),
            done=Signal(name="f_te_done", reset_less=True),
        )
        self.te_e = {k: Signal.like(v, name=f"e_te_{k}") for k, v in self.te_f.items()}
        self.te_e["rand"] = Signal(16 * P, name="e_te_rand", reset_less=True)
        self.w_te_done = Signal(name="w_te_done")
        # G: what each requester asks for, and the grants.
        self.present = [Signal(name=f"present_{p}") for p in PORTS]
        self.bank_g = [Signal(4, name=f"bank_{p}") for p in PORTS]
        self.row_g = [Signal(row_bits, name=f"row_{p}") for p in PORTS]
        self.grant = [Signal(name=f"grant_{p}") for p in PORTS]


class _Port:
    """Attribute access to a dict of port signals."""

    def __init__(self, sigs):
        self.__dict__.update(sigs)


class _Updates(wiring.Component):
    """The per-partition :class:`SlotUpdate` units side by side (latency 1).

    ``i_old``, ``i_value``, ``o_word``: partition ``p`` in bits ``[32p, 32p + 32)``; ``i_rand``
    in bits ``[16p, 16p + 16)``; the other inputs are shared.
    """

    def __init__(self, partitions, instance):
        self.partitions, self.instance = partitions, instance
        W = 32 * partitions
        super().__init__(
            {
                "i_old": In(W),
                "i_value": In(W),
                "i_dtype": In(2),
                "i_half": In(1),
                "i_overwrite": In(1),
                "i_sr": In(1),
                "i_rand": In(16 * partitions),
                "o_word": Out(W),
            }
        )

    def elaborate(self, platform):
        m = Module()
        words = []
        for p in range(self.partitions):
            ports = dict(
                i_old=self.i_old[32 * p : 32 * p + 32],
                i_value=self.i_value[32 * p : 32 * p + 32],
                i_dtype=self.i_dtype,
                i_half=self.i_half,
                i_overwrite=self.i_overwrite,
                i_sr=self.i_sr,
                i_rand=self.i_rand[16 * p : 16 * p + 16],
            )
            if self.instance:
                word = Signal(32, name=f"word{p}")
                m.submodules[f"slot{p}"] = Instance(
                    SLOT_MODULE,
                    i_clk=ClockSignal(),
                    i_rst=ResetSignal(),
                    **{f"i_{k}": v for k, v in ports.items()},
                    o_o_word=word,
                )
            else:
                m.submodules[f"slot{p}"] = u = SlotUpdate()
                m.d.comb += [getattr(u, k).eq(v) for k, v in ports.items()]
                word = u.o_word
            words.append(word)
        m.d.comb += self.o_word.eq(Cat(*words))
        return m
