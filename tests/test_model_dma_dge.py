"""The golden Descriptor Generation Engine (``ncrtl.model.dma.dge``): how an instruction is cut
into the engines' descriptors, that the parts do exactly what the instruction does, and the
DGE's refusals."""

import numpy as np
import pytest

from ncrtl.model.dma import Descriptor, Error, Geometry, Op, Side, Space, execute
from ncrtl.model.dma.dge import DgeTiming, generate, parts_of, split
from ncrtl.model.dma.isa import Indirect, check, side_addresses
from ncrtl.testbench.dma.program import random_descriptors, random_memories

GEO = Geometry(128, 4096, 1 << 20)


def _same(a, b):
    return np.array_equal(a.sbuf, b.sbuf) and np.array_equal(a.hbm, b.hbm)


@pytest.mark.parametrize(("n", "engines"), [(128, 16), (7, 16), (20, 16), (16, 4), (1, 1)])
def test_parts_cover_every_entry_once_balanced(n, engines):
    parts = parts_of(n, engines)
    assert len(parts) == min(n, engines)
    assert [b for b, _ in parts] == list(np.cumsum([0] + [c for _, c in parts])[:-1])
    assert sum(c for _, c in parts) == n
    assert max(c for _, c in parts) - min(c for _, c in parts) <= 1


def test_a_full_size_copy_gives_each_engine_eight_partitions():
    # A packed [128, 512] bf16 HBM tensor into the SBUF (seed 000's example): 16 engines,
    # 8 rows of 512 elements each.
    src = Side(Space.HBM, 0, 512, 128 * 512, [(512, 128), (1, 512)], 2)
    dst = Side(Space.SBUF, 0, 512, 128 * 512, [(512, 128), (1, 512)], 2)
    g = generate(Descriptor(Op.COPY, src, dst, tag=5), GEO)
    assert g.error == Error.NONE and g.count == 16
    for k, part in enumerate(g.parts):
        assert part.tag == 5
        assert part.src.pattern == ((512, 8), (1, 512))
        assert part.src.offset == 8 * 512 * k
        assert part.dst.offset // 512 == 8 * k  # partitions 8k .. 8k + 7


def test_a_transpose_is_cut_along_the_output_partitions():
    # HBM [512, 128] -> SBUF [128 partitions, 512]: engine k writes partitions 8k .. 8k + 7
    # of every [128, 16] output tile.
    src = Side(Space.HBM, 0, 128, 512 * 128, [(128, 512), (1, 128)], 2)
    dst = Side(Space.SBUF, 0, 512, 128 * 512, [(512, 128), (1, 512)], 2)
    g = generate(Descriptor(Op.TRANSPOSE, src, dst), GEO)
    assert g.count == 16
    for k, part in enumerate(g.parts):
        assert part.src.pattern == ((128, 512), (1, 8)) and part.src.offset == 8 * k
        assert part.dst.pattern == ((512, 8), (1, 512)) and part.dst.offset == 8 * k * 512


def test_sides_that_cannot_be_cut_alike_go_whole_to_engine_zero():
    flat = Side(Space.HBM, 0, 4096, 4096, [(1, 4096)], 4)
    rows = Side(Space.SBUF, 0, 128, 32 * 128, [(128, 32), (1, 128)], 4)
    assert split(Descriptor(Op.COPY, flat, rows)) == [Descriptor(Op.COPY, flat, rows)]
    # HBM rows that overlap (step 4 under an inner span of 8): order matters, one part
    over = Side(Space.HBM, 0, 4, 4 * 40, [(4, 16), (1, 9)], 4)
    src = Side(Space.SBUF, 0, 9, 16 * 9, [(9, 16), (1, 9)], 4)
    assert len(split(Descriptor(Op.COPY, src, over))) == 1
    apart = Side(Space.HBM, 0, 9, 16 * 9, [(9, 16), (1, 9)], 4)
    assert len(split(Descriptor(Op.COPY, src, apart))) == 16


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    ("geo", "engines"), [(Geometry(16, 512, 8192), 4), (Geometry(8, 256, 4096), 16)]
)
def test_the_parts_do_exactly_what_the_instruction_does(seed, geo, engines):
    """Random instructions of every kind: each part of a legal one is legal, touches only the
    instruction's addresses, the parts' destinations are disjoint, and running them in any
    order gives the memories of the instruction run whole, bit for bit."""
    rng = np.random.default_rng(seed)
    mem = random_memories(rng, geo)
    cut = 0
    for desc in random_descriptors(rng, geo, 60, word_bytes=8):
        g = generate(desc, geo, engines)
        whole, code, _ = execute(desc, geo, mem)
        assert g.error == code
        if code != Error.NONE:
            assert g.parts == ()
            continue
        cut += len(g.parts) > 1
        written = [
            set(map(tuple, np.stack(side_addresses(p.dst), -1).reshape(-1, 2)))
            if p.dst.space == Space.SBUF
            else set(side_addresses(p.dst).reshape(-1))
            for p in g.parts
        ]
        assert sum(len(w) for w in written) == len(set().union(*written))
        for order in (
            range(len(g.parts)),
            reversed(range(len(g.parts))),
            rng.permutation(len(g.parts)),
        ):
            out = mem
            for k in order:
                assert check(g.parts[k], geo, out.sbuf) is None
                out, code, _ = execute(g.parts[k], geo, out)
            assert _same(out, whole)
        mem = whole
    assert cut >= 10


def test_dynamic_offsets_are_refused_before_anything_else():
    src = Side(Space.HBM, 0, 8, 64, [(8, 4), (1, 8)], 4, indirect=Indirect("scalar", 0, 0, 8))
    dst = Side(Space.SBUF, 0, 8, 64, [(8, 4), (1, 8)], 2)  # also an element size mismatch
    g = generate(Descriptor(Op.COPY, src, dst), GEO)
    assert g.error == Error.DGE_INDIRECT and g.parts == ()
    assert "src has a scalar dynamic offset" in g.message
    assert "precomputed descriptors" in g.message


def test_a_broken_instruction_names_its_rule_and_makes_no_descriptor():
    src = Side(Space.HBM, 0, 8, 64, [(8, 4), (1, 8)], 4)
    dst = Side(Space.SBUF, 0, 8, 64, [(8, 4), (1, 8)], 4, offset=57)
    g = generate(Descriptor(Op.COPY, src, dst), GEO)
    assert g.error == Error.BOUNDS and g.parts == () and g.count == 0
    assert "dst" in g.message


@pytest.mark.parametrize("engines", [0, 3, 12])
def test_engine_counts_are_powers_of_two(engines):
    one = Side(Space.HBM, 0, 1, 1, [(1, 1)])
    with pytest.raises(
        ValueError, match=f"engines must be a power of two of at least 1, not {engines}"
    ):
        split(Descriptor(Op.COPY, one, one), engines)


def test_dge_schedule():
    src = Side(Space.HBM, 0, 512, 128 * 512, [(512, 128), (1, 512)], 2)
    dst = Side(Space.SBUF, 0, 512, 128 * 512, [(512, 128), (1, 512)], 2)
    good = Descriptor(Op.COPY, src, dst)
    bad = Descriptor(Op.COPY, src, Side(Space.HBM, 0, 512, 128 * 512, [(512, 128), (1, 512)], 4))
    (t0, p0, s0), (t1, p1, s1), (t2, p2, s2) = DgeTiming().schedule([good, bad, good], GEO)
    assert t0 == 0 and p0[0] == 824 and p0[-1] == 839 and s0 == 840  # 600 ns at 1.4 GHz
    assert t1 == 841 and p1 == [] and s1 == 843
    assert t2 == 844 and p2[-1] == 844 + 839
    with pytest.raises(ValueError, match="DgeTiming cycles must be an int of at least 2, not 1"):
        DgeTiming(1)
