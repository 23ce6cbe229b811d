"""``DmaSystem`` (a DMA engine with the SBUF it writes, the unit ``ncrtl verilog dma`` emits) and
``DmaQueuesSystem`` (the engine's queues and channels with the SBUF, ``ncrtl verilog
dma_queues``)."""

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.axi import AxiManager
from ncrtl.hdl.common.params import validated_init

from .check import descriptor_layout
from .engine import DmaEngine, status_layout
from .queues import DmaQueues, queue_status_layout, queued_layout
from .sbuf import Sbuf, engine_request_layout

__all__ = ["DmaSystem", "DmaQueuesSystem"]


class DmaSystem(wiring.Component):
    """:class:`~ncrtl.hdl.dma.engine.DmaEngine` joined to an :class:`~ncrtl.hdl.dma.sbuf.Sbuf`:
    descriptors and completions, the AXI4 manager port to the device memory, and the SBUF's
    engine port (a compute engine's access, or a testbench's loading and reading back).

    Parameters are the engine's (``word_bytes``, ``widths``, ``hbm_bytes``, ``overhead``,
    ``outstanding``) and the SBUF's (``partitions``, ``partition_bytes``, ``dma_wait``,
    ``instance``: its partitions as instances of one Verilog module, for Verilog generation).

    Interface
    ---------
    desc, status, axi
        The engine's.
    eng_req, eng_resp
        The SBUF's engine port.
    """

    @validated_init
    def __init__(
        self,
        word_bytes=16,
        *,
        widths=None,
        partitions=128,
        partition_bytes=192 * 1024,
        hbm_bytes=1 << 30,
        overhead=0,
        outstanding=8,
        dma_wait=4,
        instance=False,
    ):
        self.engine = DmaEngine(
            word_bytes,
            widths=widths,
            partitions=partitions,
            partition_bytes=partition_bytes,
            hbm_bytes=hbm_bytes,
            overhead=overhead,
            outstanding=outstanding,
        )
        self.sbuf = Sbuf(
            partitions, partition_bytes, word_bytes, dma_wait=dma_wait, instance=instance
        )
        wd = self.engine.wd
        words = partition_bytes // word_bytes
        super().__init__(
            {
                "desc": In(stream.Signature(descriptor_layout(wd))),
                "status": Out(stream.Signature(status_layout())),
                "axi": Out(AxiManager(word_bytes, wd.addr_bits)),
                "eng_req": In(
                    stream.Signature(engine_request_layout(partitions, words, word_bytes))
                ),
                "eng_resp": Out(stream.Signature(8 * word_bytes * partitions)),
            }
        )

    def cells(self):
        """The SBUF's partition memory module (:meth:`ncrtl.hdl.dma.sbuf.Sbuf.cells`)."""
        return self.sbuf.cells()

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = eng = self.engine
        m.submodules.sbuf = sb = self.sbuf
        wiring.connect(m, eng.sbuf_req, sb.dma_req)
        wiring.connect(m, sb.dma_resp, eng.sbuf_resp)
        wiring.connect(m, wiring.flipped(self.desc), eng.desc)
        wiring.connect(m, eng.status, wiring.flipped(self.status))
        wiring.connect(m, eng.axi, wiring.flipped(self.axi))
        wiring.connect(m, wiring.flipped(self.eng_req), sb.eng_req)
        wiring.connect(m, sb.eng_resp, wiring.flipped(self.eng_resp))
        return m


class DmaQueuesSystem(wiring.Component):
    """:class:`~ncrtl.hdl.dma.queues.DmaQueues` joined to an :class:`~ncrtl.hdl.dma.sbuf.Sbuf`.

    Parameters are the queues' (``word_bytes``, ``policy``, ``depth``, ``widths``,
    ``hbm_bytes``, ``overhead``, ``outstanding``) and the SBUF's (``partitions``,
    ``partition_bytes``, ``dma_wait``, ``instance``).

    Interface
    ---------
    desc, status, klass, calendar, done, axi
        The queues'.
    eng_req, eng_resp
        The SBUF's engine port.
    """

    @validated_init
    def __init__(
        self,
        word_bytes=16,
        *,
        policy="priority",
        depth=4,
        widths=None,
        partitions=128,
        partition_bytes=192 * 1024,
        hbm_bytes=1 << 30,
        overhead=0,
        outstanding=8,
        dma_wait=4,
        instance=False,
    ):
        self.queues = DmaQueues(
            word_bytes,
            policy=policy,
            depth=depth,
            widths=widths,
            partitions=partitions,
            partition_bytes=partition_bytes,
            hbm_bytes=hbm_bytes,
            overhead=overhead,
            outstanding=outstanding,
        )
        self.sbuf = Sbuf(
            partitions, partition_bytes, word_bytes, dma_wait=dma_wait, instance=instance
        )
        wd = self.queues.wd
        words = partition_bytes // word_bytes
        sig = self.queues.signature.members
        super().__init__(
            {
                "desc": In(stream.Signature(queued_layout(wd))),
                "status": Out(stream.Signature(queue_status_layout())),
                "klass": In(sig["klass"].shape),
                "calendar": In(sig["calendar"].shape),
                "done": Out(sig["done"].shape),
                "axi": Out(AxiManager(word_bytes, wd.addr_bits, id_bits=2)),
                "eng_req": In(
                    stream.Signature(engine_request_layout(partitions, words, word_bytes))
                ),
                "eng_resp": Out(stream.Signature(8 * word_bytes * partitions)),
            }
        )

    def cells(self):
        """The SBUF's partition memory module (:meth:`ncrtl.hdl.dma.sbuf.Sbuf.cells`)."""
        return self.sbuf.cells()

    def elaborate(self, platform):
        m = Module()
        m.submodules.queues = q = self.queues
        m.submodules.sbuf = sb = self.sbuf
        wiring.connect(m, q.sbuf_req, sb.dma_req)
        wiring.connect(m, sb.dma_resp, q.sbuf_resp)
        wiring.connect(m, wiring.flipped(self.desc), q.desc)
        wiring.connect(m, q.status, wiring.flipped(self.status))
        wiring.connect(m, q.axi, wiring.flipped(self.axi))
        wiring.connect(m, wiring.flipped(self.eng_req), sb.eng_req)
        wiring.connect(m, sb.eng_resp, wiring.flipped(self.eng_resp))
        m.d.comb += [q.klass.eq(self.klass), q.calendar.eq(self.calendar), self.done.eq(q.done)]
        return m
