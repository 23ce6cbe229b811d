"""``InstrFetch``: the instruction queues' streams fetched from device memory, one AXI4 read
port for all of them."""

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.arbiter import round_robin
from ncrtl.hdl.common.axi import AxiManager
from ncrtl.hdl.common.bits import equals
from ncrtl.hdl.common.params import check_int, validated_init
from ncrtl.model.neuroncore.isa import COUNT_BITS, SEM_BITS

from .isa import dma_widths, entry_words, queue_layout
from .ports import ErrorStrobe

__all__ = ["InstrFetch", "FetchError", "start_layout"]


class FetchError:
    """``error.code`` of :class:`InstrFetch`."""

    STREAM = 1  #: a start for a stream number the core does not have (ignored)
    RESPONSE = 2  #: a read beat answered with an error response (its entry still goes on)


def start_layout(geo):
    """A start: fetch ``entries`` queue words of stream ``stream`` (``geo.streams()`` order)
    from device memory byte ``addr`` on (:func:`~ncrtl.hdl.neuroncore.isa.entry_words` words of
    ``word_bytes`` each, one after another)."""
    return data.StructLayout(
        {"stream": SEM_BITS, "addr": dma_widths(geo).addr_bits, "entries": COUNT_BITS}
    )


class InstrFetch(wiring.Component):
    """Every stream's queue words read from device memory and handed to its queue in order.

    A ``start`` sets a stream's next address and its entries to fetch.  A stream with entries
    left and a free slot in its buffer (``depth`` entries, counting those in flight) asks for
    its next entry; among the streams that ask the read port takes one per cycle, round robin:
    an ``INCR`` burst of the entry's words (:func:`~ncrtl.hdl.neuroncore.isa.entry_words`, a
    power of two at an address aligned to it, so never across 4 KiB).  Up to ``outstanding``
    bursts are in flight; their beats come back in order (one ID), each burst's words
    assembled into the entry and written to its stream's buffer, which its queue reads.

    Parameters
    ----------
    geo : ncrtl.model.neuroncore.Geometry
    layouts : dict
        ``{stream: operation layout}`` (:func:`~ncrtl.hdl.neuroncore.isa.op_layouts`).
    depth : int
        Entries each stream's buffer holds.
    outstanding : int
        Bursts in flight on the read port.

    Interface
    ---------
    start : In(stream.Signature(start_layout(geo)))
    axi : Out(AxiManager(word_bytes, addr_bits))
        Reads only (``aw`` and ``w`` idle, ``b`` ready).
    q_{stream} : Out(stream.Signature(queue_layout(op)))
        One per stream: its queue words, in order.
    error : Out(ErrorStrobe(2))
        :class:`FetchError`.
    """

    @validated_init
    def __init__(self, geo, layouts, *, depth=2, outstanding=8):
        self.geo = geo
        self.streams = geo.streams()
        self.depth = check_int(depth, "InstrFetch depth", minimum=1, maximum=16)
        self.outstanding = check_int(outstanding, "InstrFetch outstanding", minimum=1, maximum=64)
        self.layouts = {s: queue_layout(layouts[s]) for s in self.streams}
        self.words = {s: entry_words(layouts[s], geo) for s in self.streams}
        members = {
            "start": In(stream.Signature(start_layout(geo))),
            "axi": Out(AxiManager(geo.word_bytes, dma_widths(geo).addr_bits)),
            "error": Out(ErrorStrobe(2)),
        }
        for s in self.streams:
            members[f"q_{s}"] = Out(stream.Signature(self.layouts[s]))
        super().__init__(members)

    def queue(self, name):
        return getattr(self, f"q_{name}")

    def elaborate(self, platform):
        m = Module()
        W = self.geo.word_bytes
        n = len(self.streams)
        axi = self.axi
        addr_bits = len(axi.ar.payload.addr)
        most = max(self.words.values())

        # the write channels are idle
        m.d.comb += [axi.aw.valid.eq(0), axi.w.valid.eq(0), axi.b.ready.eq(1)]

        # -- starts ----------------------------------------------------------------------------
        st = self.start.payload
        m.d.comb += self.start.ready.eq(1)
        with m.If(self.start.valid & (st.stream >= n)):
            m.d.comb += [self.error.valid.eq(1), self.error.code.eq(FetchError.STREAM)]

        # -- per stream: the next address, entries left, free buffer slots ---------------------
        asks, addrs, lens, bufs = [], [], [], []
        nxt = [Signal(addr_bits, name=f"next_{s}") for s in self.streams]
        left = [Signal(COUNT_BITS, name=f"left_{s}") for s in self.streams]
        free = [
            Signal(range(self.depth + 1), name=f"free_{s}", init=self.depth) for s in self.streams
        ]
        for i, s in enumerate(self.streams):
            buf = SyncFIFO(width=self.layouts[s].size, depth=self.depth)
            m.submodules[f"buffer_{s}"] = buf
            bufs.append(buf)
            q = self.queue(s)
            m.d.comb += [
                q.valid.eq(buf.r_rdy),
                q.payload.eq(buf.r_data),
                buf.r_en.eq(q.ready),
            ]
            asks.append(left[i].any() & free[i].any())
            addrs.append(nxt[i])
            lens.append(self.words[s] - 1)

        # -- the read port: one burst per entry, round robin among the streams that ask ---------
        tags = SyncFIFO(width=max(1, (n - 1).bit_length()), depth=self.outstanding)
        m.submodules.tags = tags
        pick, any_ask, last = round_robin(m, asks, "fetch")
        ar = axi.ar
        sel_addr = Signal(addr_bits)
        sel_len = Signal(8)
        for i in range(n):
            with m.If(equals(pick, i)):
                m.d.comb += [sel_addr.eq(addrs[i]), sel_len.eq(lens[i])]
        p = ar.payload
        m.d.comb += [
            ar.valid.eq(any_ask & tags.w_rdy),
            # one assignment of the whole address word (fields in layout order), so that its
            # constant fields are not processes of their own in the Verilog
            p.as_value().eq(
                Cat(
                    Const(0, len(p.id)),
                    sel_addr,
                    sel_len,
                    Const((W - 1).bit_length(), 3),
                    Const(1, 2),  # INCR
                )
            ),
            tags.w_data.eq(pick),
        ]
        issued = ar.valid & ar.ready
        m.d.comb += tags.w_en.eq(issued)
        with m.If(issued):
            m.d.sync += last.eq(pick)

        # -- the beats: assembled into the head burst's entry, then into its stream's buffer ----
        r = axi.r
        acc = Signal(8 * W * most)  # the entry's words so far, the first lowest
        beat = Signal(range(most + 1))
        word = Signal(8 * W * most)
        m.d.comb += word.eq(acc | (r.payload.data << (8 * W * beat)))
        m.d.comb += r.ready.eq(tags.r_rdy)
        with m.If(r.valid & r.ready):
            with m.If(r.payload.resp[1]):  # SLVERR / DECERR
                m.d.comb += [self.error.valid.eq(1), self.error.code.eq(FetchError.RESPONSE)]
            with m.If(r.payload.last):
                m.d.comb += tags.r_en.eq(1)
                m.d.sync += [acc.eq(0), beat.eq(0)]
            with m.Else():
                m.d.sync += [acc.eq(word), beat.eq(beat + 1)]
        for i, s in enumerate(self.streams):
            mine = r.valid & r.ready & r.payload.last & equals(tags.r_data, i)
            m.d.comb += [bufs[i].w_en.eq(mine), bufs[i].w_data.eq(word[: self.layouts[s].size])]
            took = issued & equals(pick, i)
            m.d.sync += free[i].eq(free[i] - took + (bufs[i].r_rdy & bufs[i].r_en))
            with m.If(took):
                m.d.sync += [nxt[i].eq(nxt[i] + self.words[s] * W), left[i].eq(left[i] - 1)]
            # a start replaces what was left (a start while entries are in flight adds to
            # nothing: the host starts a stream once)
            with m.If(self.start.valid & equals(st.stream, i)):
                m.d.sync += [nxt[i].eq(st.addr), left[i].eq(st.entries)]
        return m
