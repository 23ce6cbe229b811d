"""``VectorEngine``: the vector queue's operations to their units (``tensor_copy`` to
:class:`~ncrtl.hdl.neuroncore.evict.Evict`, ``quantize_mx`` to
:class:`~ncrtl.hdl.neuroncore.quantize.Quantize`) on one SBUF port."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from ncrtl.hdl.common.params import validated_init

from .evict import Evict
from .isa import VectorKind, vector_layout
from .ports import ErrorStrobe, InstrQueue, PsumPort, SbufPort
from .quantize import Quantize

__all__ = ["VectorEngine", "VectorError"]


class VectorError:
    """``error.code`` of :class:`VectorEngine`: ``code[:2]`` the unit's own code, ``code[2:]``
    the unit (or :attr:`NO_QUANTIZER`)."""

    QUANTIZE = 1  #: :class:`~ncrtl.hdl.neuroncore.quantize.QuantizeError` in ``code[:2]``
    NO_QUANTIZER = 2  #: a ``quantize_mx`` on a core without QuantizeMX (nothing written)


class VectorEngine(wiring.Component):
    """The Vector Engine's queue side: one operation at a time, in queue order, each to its
    unit; the next is taken once the previous one's ``done`` has strobed.  The SBUF port is the
    unit's that runs the current operation (one unit at a time, so a multiplexer, not an
    arbiter); PSUM is the eviction's.

    A core without QuantizeMX (``geo.quantize_mx`` false) has no quantizer: a ``quantize_mx``
    there writes nothing, strobes ``error`` (:attr:`VectorError.NO_QUANTIZER`) and completes.

    Parameters
    ----------
    geo : ncrtl.model.neuroncore.Geometry
    instance : bool
        The units' lanes as Verilog instances (:meth:`cells`) or Amaranth submodules.

    Interface
    ---------
    queue : In(InstrQueue(vector_layout(geo)))
    psum : Out(PsumPort(geo.partitions))
    sbuf : Out(SbufPort(...))
    error : Out(ErrorStrobe(4))
    """

    @validated_init
    def __init__(self, geo, *, instance=False):
        self.geo = geo
        self.evict = Evict(geo, instance=instance)
        self.quantize = Quantize(geo, instance=instance) if geo.quantize_mx else None
        words = geo.partition_bytes // geo.word_bytes
        super().__init__(
            {
                "queue": In(InstrQueue(vector_layout(geo))),
                "psum": Out(PsumPort(geo.partitions)),
                "sbuf": Out(SbufPort(geo.partitions, words, geo.word_bytes)),
                "error": Out(ErrorStrobe(4)),
            }
        )

    def cells(self):
        return self.evict.cells() + (self.quantize.cells() if self.quantize else [])

    def elaborate(self, platform):
        m = Module()
        m.submodules.evict = ev = self.evict
        units = {VectorKind.COPY: (ev, ev.queue, "copy")}
        if self.quantize is not None:
            m.submodules.quantize = qu = self.quantize
            units[VectorKind.QUANTIZE] = (qu, qu.queue, "quantize")
        q = self.queue.op
        kind = q.payload.kind
        busy = Signal()  # an operation taken and not yet done
        active = Signal()  # the kind of the last operation taken: its unit has the SBUF port
        connect(m, flipped(self.psum), ev.psum)

        done = Signal()  # the operation's unit has completed it
        ready = Signal()
        m.d.comb += done.eq(Cat(*(port.done for _, port, _ in units.values())).any())
        for k, (unit, port, field) in units.items():
            mine = kind == k
            m.d.comb += [
                port.op.valid.eq(q.valid & ~busy & mine),
                port.op.payload.eq(getattr(q.payload.body, field)),
            ]
            with m.If(mine):
                m.d.comb += ready.eq(port.op.ready)
        if self.quantize is None:
            # a quantize_mx with nowhere to go: refused, and done with it
            refuse = q.valid & ~busy & (kind == VectorKind.QUANTIZE)
            with m.If(refuse):
                m.d.comb += [
                    ready.eq(1),
                    self.error.valid.eq(1),
                    self.error.code.eq(VectorError.NO_QUANTIZER << 2),
                    self.queue.done.eq(1),
                ]
        else:
            with m.If(qu.error.valid):
                m.d.comb += [
                    self.error.valid.eq(1),
                    self.error.code.eq(qu.error.code | (VectorError.QUANTIZE << 2)),
                ]
        with m.If(done):
            m.d.comb += self.queue.done.eq(1)
        m.d.comb += q.ready.eq(~busy & ready)
        taken = q.valid & q.ready
        with m.If(taken):
            m.d.sync += active.eq(kind)
        m.d.sync += busy.eq(Mux(done, 0, busy | (taken & ~self.queue.done)))

        # the SBUF port: the active unit's
        sreq, sresp = self.sbuf.req, self.sbuf.resp
        for k, (unit, _, _) in units.items():
            mine = active == k
            with m.If(mine):
                m.d.comb += [
                    sreq.valid.eq(unit.sbuf.req.valid),
                    sreq.payload.eq(unit.sbuf.req.payload),
                    unit.sbuf.req.ready.eq(sreq.ready),
                    sresp.ready.eq(unit.sbuf.resp.ready),
                ]
            m.d.comb += [
                unit.sbuf.resp.valid.eq(sresp.valid & mine),
                unit.sbuf.resp.payload.eq(sresp.payload),
            ]
        return m
