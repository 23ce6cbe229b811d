"""``DmaSystem`` (a DMA engine with the SBUF it writes, the unit ``ncrtl verilog dma`` emits),
``DmaQueuesSystem`` (the engine's queues and channels with the SBUF, ``ncrtl verilog
dma_queues``) and ``SendRecvPair`` (the two cores of a logical core, each a sendrecv unit with
its SBUF, ``ncrtl verilog sendrecv``)."""

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.axi import AxiManager
from ncrtl.hdl.common.params import validated_init
from ncrtl.hdl.sbuf.memory import Sbuf, engine_request_layout

from .check import descriptor_layout
from .engine import DmaEngine, status_layout
from .queues import DmaQueues, queue_status_layout, queued_layout
from .sendrecv import SendRecv, sendrecv_layout, sendrecv_status_layout

__all__ = ["DmaSystem", "DmaQueuesSystem", "SendRecvPair"]


class DmaSystem(wiring.Component):
    """:class:`~ncrtl.hdl.dma.engine.DmaEngine` joined to an :class:`~ncrtl.hdl.sbuf.memory.Sbuf`:
    descriptors and completions, the AXI4 manager port to the device memory, and the SBUF's
    engine port (a compute engine's access, or a testbench's loading and reading back).

    Parameters are the engine's (``word_bytes``, ``widths``, ``hbm_bytes``, ``overhead``,
    ``outstanding``, ``burst``) and the SBUF's (``partitions``, ``partition_bytes``, ``dma_wait``,
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
        burst=16,
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
            burst=burst,
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
        """The SBUF's partition memory module (:meth:`ncrtl.hdl.sbuf.memory.Sbuf.cells`)."""
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
    """:class:`~ncrtl.hdl.dma.queues.DmaQueues` joined to an :class:`~ncrtl.hdl.sbuf.memory.Sbuf`.

    Parameters are the queues' (``word_bytes``, ``policy``, ``depth``, ``widths``,
    ``hbm_bytes``, ``overhead``, ``outstanding``, ``burst``) and the SBUF's (``partitions``,
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
        burst=16,
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
            burst=burst,
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
        """The SBUF's partition memory module (:meth:`ncrtl.hdl.sbuf.memory.Sbuf.cells`)."""
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


class SendRecvPair(wiring.Component):
    """The two cores of an LNC = 2 logical core for ``sendrecv``: core ``r`` is a
    :class:`~ncrtl.hdl.dma.sendrecv.SendRecv` unit of rank ``r`` on its own
    :class:`~ncrtl.hdl.sbuf.memory.Sbuf`, the units' links joined (core 0's ``tx`` to core 1's
    ``rx`` and back).

    Parameters are the units' (``word_bytes``, ``pipes``, ``depth``) and the SBUFs'
    (``partitions``, ``partition_bytes``, ``instance``).

    Interface
    ---------
    op0, op1 : In(stream.Signature(sendrecv_layout(...)))
        Each core's sendrecvs.
    status0, status1 : Out(stream.Signature(sendrecv_status_layout(pipes)))
    eng_req0, eng_resp0, eng_req1, eng_resp1
        Each SBUF's engine port.
    link_stall : In(2)
        Bit ``r`` holds the link from core ``r`` (its valid and ready low): a slow or busy
        fabric, for tests.
    """

    @validated_init
    def __init__(
        self,
        word_bytes=8,
        *,
        partitions=128,
        partition_bytes=192 * 1024,
        pipes=4,
        depth=4,
        instance=False,
    ):
        self.units = [
            SendRecv(
                word_bytes,
                partitions=partitions,
                partition_bytes=partition_bytes,
                pipes=pipes,
                depth=depth,
            )
            for _ in range(2)
        ]
        self.sbufs = [
            Sbuf(partitions, partition_bytes, word_bytes, instance=instance) for _ in range(2)
        ]
        words = partition_bytes // word_bytes
        ports = {"link_stall": In(2)}
        for r in range(2):
            ports[f"op{r}"] = In(
                stream.Signature(sendrecv_layout(partitions, partition_bytes, pipes))
            )
            ports[f"status{r}"] = Out(stream.Signature(sendrecv_status_layout(pipes)))
            ports[f"eng_req{r}"] = In(
                stream.Signature(engine_request_layout(partitions, words, word_bytes))
            )
            ports[f"eng_resp{r}"] = Out(stream.Signature(8 * word_bytes * partitions))
        super().__init__(ports)

    def cells(self):
        """The SBUFs' partition memory module (one module for both)."""
        return self.sbufs[0].cells()

    def elaborate(self, platform):
        m = Module()
        for r in range(2):
            unit, sb = self.units[r], self.sbufs[r]
            m.submodules[f"unit{r}"] = unit
            m.submodules[f"sbuf{r}"] = sb
            wiring.connect(m, unit.sbuf_req, sb.dma_req)
            wiring.connect(m, sb.dma_resp, unit.sbuf_resp)
            wiring.connect(m, wiring.flipped(getattr(self, f"op{r}")), unit.op)
            wiring.connect(m, unit.status, wiring.flipped(getattr(self, f"status{r}")))
            wiring.connect(m, wiring.flipped(getattr(self, f"eng_req{r}")), sb.eng_req)
            wiring.connect(m, sb.eng_resp, wiring.flipped(getattr(self, f"eng_resp{r}")))
            rank = Signal(name=f"rank{r}")
            m.d.comb += [rank.eq(r), unit.rank.eq(rank)]
        for r in range(2):
            a, b = self.units[r].tx, self.units[1 - r].rx
            stall = self.link_stall[r]
            m.d.comb += [
                b.payload.eq(a.payload),
                b.valid.eq(a.valid & ~stall),
                a.ready.eq(b.ready & ~stall),
            ]
        return m
