"""The Descriptor Generation Engine (DGE): one DMA instruction turned into the descriptors of
the core's DMA engines, in hardware, with no stored descriptor list (seed 000).

A core has :data:`ENGINES` DMA engines, each typically serving ``128 / 16 = 8`` partitions of
a transfer, and two DGE instances.  An instruction is a :class:`~ncrtl.model.dma.isa.Descriptor`
over the whole transfer; :func:`split` cuts it into at most ``engines`` parts, part ``k`` for
engine ``k``:

* a copy or read-add-write along the outermost entry of both access patterns (the partition
  entry of an SBUF side), when both have the same ``num`` (``n``): ``min(engines, n)`` parts of
  ``n // parts`` entries, the first ``n % parts`` one more; each part keeps the instruction's
  patterns with that entry's ``num`` cut and the offset moved by ``begin x step``.  Sides whose
  outermost counts differ (a ``[128, 512]`` tensor read through a flat ``[1, 65536]`` pattern)
  cannot be cut into rectangles the same way, and a device-memory destination whose outermost
  entries overlap (``|step|`` not above the span of the inner entries: a later entry may write
  what an earlier one wrote, and the engines run in parallel) must keep its order: in both
  cases the whole instruction is one part, for engine 0.
* a DMA transpose (views ``[A, B]`` and ``[B, A]``) cooperatively, as the seed describes: the
  destination's partition entry (``B``) and the source's inner entry with it, so that the
  engines write the partitions of each ``[B, 16]`` output tile together, engine ``k`` its
  ``B / 16`` of them.

Every part is a legal descriptor when the instruction is, its addresses a subset of the
instruction's, and the parts' destinations are disjoint; so the parts, run in any order or
interleaved, leave the memories exactly as the instruction run whole would
(:func:`ncrtl.model.dma.engine.execute`), which the tests prove.

:func:`generate` is the DGE's whole decision: the instruction's rules
(:func:`ncrtl.model.dma.isa.check`) are tested before any descriptor leaves, so a broken
instruction writes nothing; one with a dynamic offset (``scalar_offset`` / ``vector_offset``)
is refused with :attr:`~ncrtl.model.dma.isa.Error.DGE_INDIRECT` (the hardware DGE does no
gather or scatter; such transfers use precomputed descriptors).  The completion semaphore of
an instruction counts its parts: a consumer waits for ``+ parts`` (``+16`` for a full-size
transfer).

Timing (:class:`DgeTiming`, the RTL's ``ncrtl.hdl.dma.dge.Dge`` cycle for cycle): an
instruction accepted in cycle ``t`` offers part ``k`` in cycle ``t + cycles + k`` when every
part is taken as soon as it is offered (a full engine queue delays it and every later part),
its status the cycle after the last part is taken, and the DGE accepts the next instruction
the cycle after its status is taken.  A broken instruction's status is valid in cycle ``t +
2``.  The default ``cycles`` makes a 16-part instruction's last descriptor leave 840 cycles
after its acceptance: 600 ns at 1.4 GHz, the documented cost of one DGE instruction on
NeuronCore-v3.

See docs/dma.md, "Descriptor generation".
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ncrtl.model.dma.isa import Error, Op, Space, check

__all__ = ["ENGINES", "DGE_CYCLES", "DgeTiming", "split", "generate", "parts_of", "Generated"]

#: DMA engines of a core (seed 000: "each NeuronCore-v3 is typically paired with 16x DMA
#: engines").
ENGINES = 16
#: Cycles from an instruction's acceptance to its first descriptor by default: with 16 parts
#: the last one leaves in cycle 840 (600 ns at 1.4 GHz, seed 000).
DGE_CYCLES = 840 - ENGINES


def _check_engines(engines):
    if not isinstance(engines, int) or isinstance(engines, bool):
        raise TypeError(f"engines must be an int, not {engines!r}")
    if engines < 1 or engines & (engines - 1):
        raise ValueError(f"engines must be a power of two of at least 1, not {engines}")
    return engines


def parts_of(n, engines):
    """``[(begin, count)]`` of ``n`` entries over at most ``engines`` engines: ``min(engines,
    n)`` parts, the first ``n % parts`` one longer."""
    p = min(engines, n)
    q, r = divmod(n, p)
    out, begin = [], 0
    for k in range(p):
        c = q + (k < r)
        out.append((begin, c))
        begin += c
    return out


def _cut(side, level, begin, count):
    """``side`` with pattern entry ``level`` restricted to ``count`` entries from ``begin``."""
    step, _ = side.pattern[level]
    pattern = list(side.pattern)
    pattern[level] = (step, count)
    return replace(side, pattern=tuple(pattern), offset=side.offset + begin * step)


def _rows_apart(side):
    """The outermost entries of a device-memory ``side`` address disjoint intervals: ``|step|``
    above the span of the inner entries.  An SBUF side's are partitions, always apart."""
    if side.space != Space.HBM:
        return True
    span = sum(abs(s) * (n - 1) for s, n in side.pattern[1:])
    return abs(side.pattern[0][0]) > span


def split(desc, engines=ENGINES):
    """The parts of instruction ``desc`` (see the module docstring): a list of descriptors,
    part ``k`` for engine ``k``, each with the instruction's tag.  ``desc`` is not checked:
    :func:`generate` checks first."""
    _check_engines(engines)
    src, dst = desc.src, desc.dst
    if desc.op == Op.TRANSPOSE:
        cut = (len(src.pattern) - 1, 0)
        n = dst.pattern[0][1]
    elif src.pattern[0][1] == dst.pattern[0][1] and _rows_apart(dst):
        cut = (0, 0)
        n = src.pattern[0][1]
    else:
        return [desc]
    return [
        replace(desc, src=_cut(src, cut[0], b, c), dst=_cut(dst, cut[1], b, c))
        for b, c in parts_of(n, engines)
    ]


@dataclass(frozen=True)
class Generated:
    """What the DGE made of one instruction: its ``error`` (``NONE`` when it went out), the
    rule's ``message``, and the ``parts`` (empty on an error)."""

    error: Error
    message: str
    parts: tuple

    @property
    def count(self):
        """The semaphore increment a consumer waits for."""
        return len(self.parts)


def generate(desc, geo, engines=ENGINES):
    """The DGE's decision on instruction ``desc`` against the memories of ``geo``: a dynamic
    offset is refused (``DGE_INDIRECT``), then every rule of
    :func:`ncrtl.model.dma.isa.check`; a legal instruction gives its :func:`split` parts."""
    _check_engines(engines)
    for side, what in ((desc.src, "src"), (desc.dst, "dst")):
        if side.indirect is not None:
            return Generated(
                Error.DGE_INDIRECT,
                f"{what} has a {side.indirect.kind} dynamic offset: the hardware descriptor "
                f"generator does no gather or scatter; use precomputed descriptors",
                (),
            )
    broken = check(desc, geo)
    if broken is not None:
        return Generated(broken[0], broken[1], ())
    return Generated(Error.NONE, "", tuple(split(desc, engines)))


@dataclass(frozen=True)
class DgeTiming:
    """The DGE's timing (``ncrtl.hdl.dma.dge.Dge``): ``cycles`` from an instruction's
    acceptance to its first part being offered."""

    cycles: int = DGE_CYCLES

    def __post_init__(self):
        if not isinstance(self.cycles, int) or self.cycles < 2:
            raise ValueError(f"DgeTiming cycles must be an int of at least 2, not {self.cycles}")

    def schedule(self, instructions, geo, engines=ENGINES):
        """Cycles of a stream of instructions offered back to back, every part and status
        taken when offered: ``[(accepted, [part cycles], status cycle)]``, cycle 0 being the
        first acceptance."""
        out, t = [], 0
        for desc in instructions:
            g = generate(desc, geo, engines)
            if g.error != Error.NONE:
                status, parts = t + 2, []
            else:
                parts = [t + self.cycles + k for k in range(g.count)]
                status = parts[-1] + 1
            out.append((t, parts, status))
            t = status + 1
        return out
