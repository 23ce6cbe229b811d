"""The bit layouts of the NeuronCore's queue entries (:mod:`ncrtl.model.neuroncore.isa` says
what each entry means), and :func:`pack`, which turns the model's entries into queue words.

A queue word is ``kind`` (0: a :class:`~ncrtl.model.neuroncore.isa.Wait`, 1: the engine's
operation) and ``body``, the wait or the operation laid over the same bits."""

from amaranth.lib import data

from ncrtl.hdl.dma.check import Widths, descriptor_layout
from ncrtl.hdl.psum.control import INSTR_LAYOUT as PSUM_INSTR_LAYOUT
from ncrtl.hdl.tensor_engine.control import INSTR_LAYOUT as TE_INSTR_LAYOUT
from ncrtl.model.dma.isa import encode as dma_encode
from ncrtl.model.neuroncore.isa import (
    COUNT_BITS,
    SEM_BITS,
    CopyOp,
    DmaOp,
    MatmulOp,
    QuantizeOp,
    Wait,
)

__all__ = [
    "ESIZE_CODES",
    "wait_layout",
    "matmul_layout",
    "copy_layout",
    "quantize_layout",
    "vector_layout",
    "VectorKind",
    "dma_layout",
    "queue_layout",
    "dma_widths",
    "op_layouts",
    "pack",
    "entry_words",
    "program_image",
    "fetch_starts",
    "PROGRAM_ALIGN",
]

#: The instruction streams' place in device memory: the first byte after the kernel's tensors
#: that is a multiple of this.
PROGRAM_ALIGN = 4096

#: An element size (bytes) as its 2-bit code: log2.
ESIZE_CODES = {1: 0, 2: 1, 4: 2}


def wait_layout():
    return data.StructLayout({"sem": SEM_BITS, "count": COUNT_BITS})


def matmul_layout(geo):
    """:class:`~ncrtl.model.neuroncore.isa.MatmulOp`: the two Tensor Engine words, the PSUM
    write, the operands' SBUF byte addresses and element size codes, and what a second pass
    over each operand reads (``second``: :class:`~ncrtl.model.neuroncore.isa.Second`) from
    where (``s_addr2``, ``m_addr2``)."""
    return data.StructLayout(
        {
            "ls": TE_INSTR_LAYOUT,
            "mm": TE_INSTR_LAYOUT,
            "psum": PSUM_INSTR_LAYOUT,
            "s_addr": geo.addr_bits,
            "m_addr": geo.addr_bits,
            "s_esize": 2,
            "m_esize": 2,
            "second": 2,
            "s_addr2": geo.addr_bits,
            "m_addr2": geo.addr_bits,
        }
    )


def copy_layout(geo):
    """:class:`~ncrtl.model.neuroncore.isa.CopyOp`; ``src_addr`` wide enough for either
    memory's byte addresses."""
    part = max(1, (geo.partitions - 1).bit_length())
    return data.StructLayout(
        {
            "src_psum": 1,
            "src_addr": max(geo.addr_bits, geo.psum_addr_bits),
            "dst_addr": geo.addr_bits,
            "part": part,
            "parts": geo.partitions.bit_length(),
            "n": geo.addr_bits + 1,
            "src_esize": 2,
            "dst_esize": 2,
            "convert": 3,
        }
    )


def quantize_layout(geo):
    """:class:`~ncrtl.model.neuroncore.isa.QuantizeOp`."""
    part = max(1, (geo.partitions - 1).bit_length())
    return data.StructLayout(
        {
            "src_addr": geo.addr_bits,
            "dst_addr": geo.addr_bits,
            "scale_addr": geo.addr_bits,
            "part": part,
            "parts": geo.partitions.bit_length(),
            "n": geo.addr_bits + 1,
            "src_fmt": 1,
            "elem_fmt": 2,
        }
    )


class VectorKind:
    """``vector_layout``'s ``kind``: which unit of the Vector Engine runs the operation."""

    COPY = 0  #: ``tensor_copy`` (:class:`~ncrtl.hdl.neuroncore.evict.Evict`)
    QUANTIZE = 1  #: ``quantize_mx`` (:class:`~ncrtl.hdl.neuroncore.quantize.Quantize`)


def vector_layout(geo):
    """A Vector Engine operation: ``kind`` (:class:`VectorKind`) and the operation."""
    return data.StructLayout(
        {
            "kind": 1,
            "body": data.UnionLayout({"copy": copy_layout(geo), "quantize": quantize_layout(geo)}),
        }
    )


def dma_widths(geo):
    """The DMA descriptor field widths of a core geometry."""
    return Widths.for_memories(geo.hbm_bytes, geo.partitions)


def dma_layout(geo):
    """:class:`~ncrtl.model.neuroncore.isa.DmaOp`: the descriptor and its part count."""
    return data.StructLayout(
        {"desc": descriptor_layout(dma_widths(geo)), "parts": geo.dma_engines.bit_length()}
    )


def queue_layout(op):
    """A queue word of an engine whose operation has layout ``op``."""
    return data.StructLayout(
        {"kind": 1, "body": data.UnionLayout({"wait": wait_layout(), "op": op})}
    )


def op_layouts(geo):
    """``{stream: operation layout}`` of every stream of ``geo``."""
    out = {"tensor": matmul_layout(geo), "vector": vector_layout(geo)}
    for q in range(geo.dma_queues):
        out[f"dma{q}"] = dma_layout(geo)
    return out


def entry_words(op, geo):
    """The ``word_bytes`` words a queue word of operation layout ``op`` takes in device memory:
    enough for its bits, rounded up to a power of two (an entry at an address aligned to its
    size is one burst that never crosses 4 KiB)."""
    need = -(-queue_layout(op).size // (8 * geo.word_bytes))
    return 1 << (need - 1).bit_length()


def program_image(encoded, geo):
    """Where every queue's entries go in device memory, after the kernel's tensors:
    ``(base, image, starts)``, ``image`` the bytes from ``base`` (uint8), ``starts`` ``{stream:
    (address, entries)}`` of the streams with entries.  Each entry is its queue word
    (:func:`pack`), little-endian, in :func:`entry_words` words; the streams follow one
    another in :meth:`~ncrtl.model.neuroncore.isa.Geometry.streams` order, each from an
    address aligned to its entries' size.  Raises
    :class:`~ncrtl.model.neuroncore.isa.Unsupported` when they do not fit the core's device
    memory."""
    import numpy as np

    from ncrtl.model.neuroncore.isa import Unsupported

    layouts = op_layouts(geo)
    base = -(-encoded.hbm_end // PROGRAM_ALIGN) * PROGRAM_ALIGN
    parts, starts, addr = [], {}, base
    for s in geo.streams():
        entries = encoded.queues[s]
        if not entries:
            continue
        size = entry_words(layouts[s], geo) * geo.word_bytes
        start = -(-addr // size) * size
        if start > addr:
            parts.append(np.zeros(start - addr, np.uint8))
        addr = start
        starts[s] = (addr, len(entries))
        for e in entries:
            parts.append(np.frombuffer(pack(e, geo).to_bytes(size, "little"), np.uint8))
        addr += size * len(entries)
    if addr > geo.hbm_bytes:
        raise Unsupported(
            f"the RTL NeuronCore fetches its instruction streams from device memory: they need "
            f"{addr - base} bytes after the kernel's tensors (from byte {base}), the core's "
            f"device memory has {geo.hbm_bytes}"
        )
    image = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
    return base, image, starts


def fetch_starts(encoded, geo, latency):
    """The cycle each stream's first entry reaches its queue, as the timing model's stream
    starts (``Params.starts``): the instruction fetch serves the streams' first entries in
    stream order, a stream's read issued the cycle after its start (the starts one per cycle
    from cycle 0), its beats ``latency`` cycles later at the earliest and one per cycle after
    the earlier streams' beats.  Later entries are taken to arrive in time (two are buffered
    per queue)."""
    layouts = op_layouts(geo)
    out, beat, i = {}, 0, 0
    for s in geo.streams():
        if not encoded.queues[s]:
            continue
        first = max(beat, i + 1 + latency)
        beat = first + entry_words(layouts[s], geo)
        out[s] = beat
        i += 1
    return out


def pack(entry, geo):
    """The queue word (int) of a model entry on a core of geometry ``geo``."""
    if isinstance(entry, Wait):
        body = {"wait": {"sem": entry.sem, "count": entry.count}}
        kind, op = 0, None
    else:
        kind = 1
        if isinstance(entry, MatmulOp):
            op = matmul_layout(geo)
            fields = {
                "s_addr": entry.s_addr,
                "m_addr": entry.m_addr,
                "s_esize": ESIZE_CODES[entry.s_esize],
                "m_esize": ESIZE_CODES[entry.m_esize],
                "second": entry.second,
                "s_addr2": entry.s_addr2,
                "m_addr2": entry.m_addr2,
            }
            value = op.const(fields).as_bits()
            value |= entry.ls << op["ls"].offset
            value |= entry.mm << op["mm"].offset
            value |= entry.psum << op["psum"].offset
            return 1 | value << 1  # kind 1, the operation in the body
        if isinstance(entry, CopyOp):
            op = vector_layout(geo)
            copy = {
                "src_psum": int(entry.src_psum),
                "src_addr": entry.src_addr,
                "dst_addr": entry.dst_addr,
                "part": entry.part,
                "parts": entry.parts,
                "n": entry.n,
                "src_esize": ESIZE_CODES[entry.src_esize],
                "dst_esize": ESIZE_CODES[entry.dst_esize],
                "convert": entry.convert,
            }
            fields = {"kind": VectorKind.COPY, "body": {"copy": copy}}
        elif isinstance(entry, QuantizeOp):
            op = vector_layout(geo)
            quantize = {
                "src_addr": entry.src_addr,
                "dst_addr": entry.dst_addr,
                "scale_addr": entry.scale_addr,
                "part": entry.part,
                "parts": entry.parts,
                "n": entry.n,
                "src_fmt": entry.src_fmt,
                "elem_fmt": entry.elem_fmt,
            }
            fields = {"kind": VectorKind.QUANTIZE, "body": {"quantize": quantize}}
        elif isinstance(entry, DmaOp):
            op = dma_layout(geo)
            fields = {"desc": dma_encode(entry.desc), "parts": entry.parts}
        else:
            raise TypeError(f"not a NeuronCore queue entry: {entry!r}")
        body = {"op": fields}
    layout = queue_layout(op if op is not None else wait_layout())
    return layout.const({"kind": kind, "body": body}).as_bits()
