"""The DMA golden model: NKI access patterns against the loop of seed 003, descriptors against
the NKI-level functions, every rule and its error code, nothing written on an error."""

import itertools
import re

import ml_dtypes
import numpy as np
import pytest

from ncrtl.model.dma import (
    AccessPattern,
    AddDtype,
    Descriptor,
    Error,
    Geometry,
    Indirect,
    Memories,
    Op,
    Side,
    Space,
    ap_indices,
    ap_view,
    ap_write,
    check,
    dma_add,
    dma_copy,
    dma_transpose,
    execute,
)
from ncrtl.model.fp import fp32_add
from ncrtl.testbench.dma.program import random_memories


def loop_view(t, pattern, offset=0, scalar=None, vector=None, indirect_dim=0):
    """Seed 003's pseudo-code, literally: nested loops over the flattened tensor."""
    flat = t.reshape(-1)
    out = np.empty([n for _, n in pattern], dtype=t.dtype)
    for ix in itertools.product(*[range(n) for _, n in pattern]):
        a = offset
        for d, (i, (step, _)) in enumerate(zip(ix, pattern)):
            if d == 0 and vector is not None:
                a += int(np.prod(t.shape[1:])) * vector[i]
            else:
                a += i * step
        if scalar is not None:
            a += scalar * int(np.prod(t.shape[indirect_dim + 1 :]))
        out[ix] = flat[a]
    return out


def _random_pattern(rng, shape):
    """A random pattern of 1-5 entries (negative and zero steps too) that stays inside a
    tensor of ``shape``, with its offset."""
    total = int(np.prod(shape))
    while True:
        dims = int(rng.integers(1, 6))
        pat = [(int(rng.integers(-6, 7)), int(rng.integers(1, 5))) for _ in range(dims)]
        lo = sum(min(0, s * (n - 1)) for s, n in pat)
        hi = sum(max(0, s * (n - 1)) for s, n in pat)
        if hi - lo < total:
            return pat, int(rng.integers(-lo, total - hi))


def test_ap_view_is_the_loop_of_the_seed():
    rng = np.random.default_rng(1)
    for _ in range(300):
        shape = tuple(int(s) for s in rng.integers(1, 9, int(rng.integers(1, 4))))
        t = rng.integers(0, 1 << 16, shape).astype(np.uint16)
        pat, off = _random_pattern(rng, shape)
        got = ap_view(t, AccessPattern(pat, off))
        assert np.array_equal(got, loop_view(t, pat, off)), (shape, pat, off)


def test_the_seeds_examples():
    t = np.arange(256, dtype=np.float32).reshape(16, 16)
    # t[0:16, 8:16]
    assert np.array_equal(ap_view(t, AccessPattern([[16, 16], [1, 8]], 8)), t[:, 8:16])
    # int32 [128, 256] read as bf16: [128, 512], the element counts doubled
    i = np.arange(128 * 256, dtype=np.int32).reshape(128, 256)
    v = ap_view(i, AccessPattern([[512, 128], [1, 512]], 0, dtype=ml_dtypes.bfloat16))
    assert v.shape == (128, 512) and v.dtype == ml_dtypes.bfloat16
    assert np.array_equal(v.view(np.uint16), i.view(np.uint16).reshape(128, 512))
    # scalar dynamic offset: A[3*128:, 0:256] with the 3*128 from a run-time value
    a = np.arange(512 * 512, dtype=np.float32).reshape(512, 512)
    got = ap_view(a, AccessPattern([[512, 128], [1, 256]], 0, scalar_offset=3 * 128))
    assert np.array_equal(got, a[384:, :256])
    # vector dynamic offset: rows picked by an index vector; the pattern's leading step is
    # ignored, the base tensor's row is used
    b = np.arange(128 * 512, dtype=np.float32).reshape(128, 512)
    idx = np.arange(0, 128, 2)
    got = ap_view(b, AccessPattern([[999, 64], [1, 512]], 0, vector_offset=idx))
    assert np.array_equal(got, b[idx])
    assert np.array_equal(got, loop_view(b, [(999, 64), (1, 512)], 0, vector=idx))


def test_dynamic_offsets_on_other_dimensions_and_random():
    rng = np.random.default_rng(2)
    t = rng.standard_normal((4, 6, 8)).astype(np.float32)
    for d in range(3):
        for s in range(3):
            pat = [[48, 1], [8, 2], [1, 3]]
            got = ap_view(t, AccessPattern(pat, 1, scalar_offset=s, indirect_dim=d))
            assert np.array_equal(got, loop_view(t, pat, 1, scalar=s, indirect_dim=d))
    vec = [3, 0, 2]
    pat = [[48, 3], [1, 5]]
    got = ap_view(t, AccessPattern(pat, 2, vector_offset=vec))
    assert np.array_equal(got, loop_view(t, pat, 2, vector=vec))


def test_access_pattern_rules():
    t = np.zeros((16, 32), np.float32)
    # the seed's illegal example: every other partition
    with pytest.raises(ValueError, match="partition step 64 must be .* 32"):
        ap_indices(t.shape, AccessPattern([[64, 8], [1, 32]]), partition_rule=True)
    ap_indices(t.shape, AccessPattern([[64, 8], [1, 32]]))  # fine in the device memory
    with pytest.raises(ValueError, match="reads element 512 at view index \\[15, 32\\]"):
        ap_indices(t.shape, AccessPattern([[32, 16], [1, 33]]))
    with pytest.raises(ValueError, match="outside the tensor"):
        ap_indices(t.shape, AccessPattern([[32, 16], [-1, 2]]))
    with pytest.raises(ValueError, match="1 to 5"):
        AccessPattern([[1, 1]] * 6)
    with pytest.raises(ValueError, match="num must be >= 1"):
        AccessPattern([[1, 0]])
    with pytest.raises(ValueError, match="at most one"):
        AccessPattern([[1, 2]], scalar_offset=0, vector_offset=[0, 1])
    with pytest.raises(ValueError, match="only indirect_dim=0"):
        AccessPattern([[1, 2]], vector_offset=[0, 1], indirect_dim=1)
    with pytest.raises(ValueError, match="vector_offset has 3 indices"):
        AccessPattern([[1, 2]], vector_offset=[0, 1, 2])
    with pytest.raises(ValueError, match="not a multiple of the new element size 4"):
        ap_view(np.zeros((4, 3), np.uint16), AccessPattern([[1, 1]], dtype=np.float32))


def test_an_sbuf_access_stays_in_its_partition_row_at_both_levels():
    """One rule, stated in ``ap_indices``: the NKI-level golden (``ap_view``, ``dma_copy``,
    ``dma_transpose``, ``dma_add`` with an SBUF side) and the descriptor-level ``check`` refuse a
    pattern whose free address runs past its partition row, and take the same pattern where
    it stays inside (and in the device memory, where there are no partitions)."""
    t = np.arange(16 * 32, dtype=np.float32).reshape(16, 32)
    row_msg = "view index \\[0, 32\\] leaves its partition row of 32 elements"
    for pat, off in (([[32, 2], [1, 33]], 0), ([[32, 2], [1, 4]], 30), ([[32, 2], [-1, 2]], 32)):
        ap = AccessPattern(pat, off)
        with pytest.raises(ValueError, match="leaves its partition row of 32 elements"):
            ap_view(t, ap, partition_rule=True)
        with pytest.raises(ValueError, match="leaves its partition row"):
            dma_copy(np.zeros(ap.size, np.float32), [[1, ap.size]], t, ap, src_sbuf=True)
        with pytest.raises(ValueError, match="leaves its partition row"):
            dma_copy(t, ap, np.zeros(ap.size, np.float32), [[1, ap.size]], dst_sbuf=True)
        with pytest.raises(ValueError, match="leaves its partition row"):
            dma_add(t, ap, np.zeros(ap.size, np.float32), [[1, ap.size]])
        ap_view(t, ap)  # the device memory has no partitions: the flat view is fine
        side = Side(Space.SBUF, 0, row=32, extent=16 * 32, pattern=pat, offset=off)
        hbm = Side(Space.HBM, 0, row=ap.size, extent=ap.size, pattern=[[1, ap.size]])
        err, msg = check(Descriptor(Op.COPY, side, hbm), GEO)
        assert err == Error.BOUNDS and "leaves its partition row of 32 elements" in msg, msg
        err, msg = check(Descriptor(Op.COPY, hbm, side), GEO)
        assert err == Error.BOUNDS and "leaves its partition row" in msg, msg
    with pytest.raises(ValueError, match=row_msg):
        ap_view(t, AccessPattern([[32, 2], [1, 33]]), partition_rule=True)
    with pytest.raises(ValueError, match="leaves its partition row"):
        dma_transpose(
            np.zeros((33, 2), np.float32),
            [[2, 33], [1, 2]],
            t,
            [[32, 2], [1, 33]],
            src_sbuf=True,
        )
    # inside every row: the same elements at both levels
    ap = AccessPattern([[32, 2], [1, 4]], 28)
    assert ap_view(t, ap, partition_rule=True).tolist() == [[28, 29, 30, 31], [60, 61, 62, 63]]
    side = Side(Space.SBUF, 0, row=32, extent=16 * 32, pattern=[[32, 2], [1, 4]], offset=28)
    hbm = Side(Space.HBM, 0, row=8, extent=8, pattern=[[1, 8]])
    assert check(Descriptor(Op.COPY, side, hbm), GEO) is None
    # a vector offset picks the partitions; the free address still stays in each row
    ap = AccessPattern([[32, 2], [1, 3]], 30, vector_offset=[4, 1])
    with pytest.raises(ValueError, match="view index \\[0, 2\\] leaves its partition row"):
        ap_view(t, ap, partition_rule=True)


@pytest.mark.parametrize(
    "kwargs, text",
    [
        ({"pattern": [[1.5, 2]]}, "pattern entry 0 step must be an integer, not 1.5"),
        ({"pattern": [[2.0, 2]]}, "pattern entry 0 step must be an integer, not 2.0"),
        ({"pattern": [["2", 2]]}, "pattern entry 0 step must be an integer, not '2'"),
        ({"pattern": [[1, None]]}, "pattern entry 0 num must be an integer, not None"),
        ({"pattern": [[1, True]]}, "pattern entry 0 num must be an integer, not True"),
        ({"pattern": [[1, 4], [1, 2, 3]]}, "pattern entry 1 .* is not a \\[step, num\\] pair"),
        ({"pattern": "[[1, 2]]"}, "pattern must be a list of \\[step, num\\] pairs"),
        ({"pattern": None}, "pattern must be a list of \\[step, num\\] pairs"),
        ({"pattern": [[1, 10**12]]}, "addresses 1000000000000 elements; a view has at most"),
        ({"pattern": [[0, 2**13]] * 4}, "a view has at most 67108864"),
        ({"pattern": [[1, 2]], "offset": 0.5}, "offset must be an integer, not 0.5"),
        ({"pattern": [[1, 2]], "offset": None}, "offset must be an integer, not None"),
        ({"pattern": [[1, 2]], "scalar_offset": "3"}, "scalar_offset must be an integer"),
        ({"pattern": [[1, 2]], "vector_offset": [0.5, 1]}, "vector_offset must hold integers"),
        ({"pattern": [[1, 2]], "indirect_dim": 1.0}, "indirect_dim must be an integer"),
        ({"pattern": [[1, 2]], "indirect_dim": -1, "scalar_offset": 0}, "indirect_dim must be"),
    ],
)
def test_access_pattern_fields_are_checked_before_any_index(kwargs, text):
    """Every field's type and range, one ValueError naming the field and the rule, before any
    index is built (a num of 10^12 is refused at once, not after filling the memory)."""
    with pytest.raises(ValueError, match=text):
        AccessPattern(**kwargs)


def test_access_pattern_magnitudes_and_numpy_integers():
    t = np.zeros((4, 8), np.float32)
    with pytest.raises(ValueError, match="addresses elements 0 to 10000000000000000000000000"):
        ap_indices(t.shape, AccessPattern([[10**25, 2]]))
    with pytest.raises(ValueError, match="outside the tensor's 32 elements"):
        ap_indices(t.shape, AccessPattern([[1, 2]], scalar_offset=10**30))
    ap = AccessPattern([[np.int64(8), np.int32(2)], [np.uint8(1), 3]], np.int16(1))
    assert ap.pattern == ((8, 2), (1, 3)) and type(ap.offset) is int
    with pytest.raises(ValueError, match="Side pattern entry 1 step must be an integer, not 1.5"):
        Side(Space.HBM, 0, row=8, extent=32, pattern=[[8, 4], [1.5, 8]])
    with pytest.raises(ValueError, match="Side offset must be an integer"):
        Side(Space.HBM, 0, row=8, extent=32, pattern=[[8, 4]], offset=1.0)


def test_ap_write_keeps_the_last_visit():
    t = np.zeros(8, np.int32)
    out = ap_write(t, AccessPattern([[0, 3], [1, 2]], 1), np.arange(6, dtype=np.int32))
    assert list(out) == [0, 4, 5, 0, 0, 0, 0, 0]
    assert list(t) == [0] * 8


# -- descriptors -------------------------------------------------------------------------------

GEO = Geometry(partitions=16, partition_bytes=256, hbm_bytes=4096)


def _hbm_tensor(mem, base, shape, dtype):
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return mem.hbm[base : base + n].view(dtype).reshape(shape)


def _sbuf_tensor(mem, partition, base, shape, dtype):
    row = int(np.prod(shape[1:])) * np.dtype(dtype).itemsize
    return (
        np.ascontiguousarray(mem.sbuf[partition : partition + shape[0], base : base + row])
        .view(dtype)
        .reshape(shape)
    )


def test_copy_hbm_to_sbuf_and_back_matches_the_nki_level():
    rng = np.random.default_rng(3)
    mem = random_memories(rng, GEO)
    # HBM [8, 24] fp32 at 256 -> SBUF [8 partitions, 24] at partition 4, byte 32: columns 4..12
    src = Side(Space.HBM, 256, row=24, extent=8 * 24, pattern=[[24, 8], [1, 8]], offset=4)
    dst = Side(Space.SBUF, 32, row=24, extent=8 * 24, pattern=[[24, 8], [1, 8]], partition=4)
    out, err, msg = execute(Descriptor(Op.COPY, src, dst), GEO, mem)
    assert err == Error.NONE, msg
    h = _hbm_tensor(mem, 256, (8, 24), np.float32)
    want = dma_copy(
        _sbuf_tensor(mem, 4, 32, (8, 24), np.float32),
        [[24, 8], [1, 8]],
        h,
        AccessPattern([[24, 8], [1, 8]], 4),
        dst_sbuf=True,
    )
    assert np.array_equal(
        _sbuf_tensor(out, 4, 32, (8, 24), np.float32).view(np.uint32), want.view(np.uint32)
    )
    # nothing else changed
    mask = np.ones_like(mem.sbuf, bool)
    mask[4:12, 32 : 32 + 96] = False
    assert np.array_equal(out.sbuf[mask], mem.sbuf[mask])
    assert np.array_equal(out.hbm, mem.hbm)


def test_transpose_is_bit_exact_with_nan_payloads():
    rng = np.random.default_rng(4)
    mem = random_memories(rng, GEO)
    for esize, dt in ((2, np.uint16), (4, np.uint32)):
        # HBM [6, 10] -> SBUF [10 partitions, 6]
        src = Side(Space.HBM, 64, row=10, extent=60, pattern=[[10, 6], [1, 10]], esize=esize)
        dst = Side(Space.SBUF, 0, row=6, extent=60, pattern=[[6, 10], [1, 6]], esize=esize)
        out, err, msg = execute(Descriptor(Op.TRANSPOSE, src, dst), GEO, mem)
        assert err == Error.NONE, msg
        h = _hbm_tensor(mem, 64, (6, 10), dt)
        assert np.array_equal(_sbuf_tensor(out, 0, 0, (10, 6), dt), h.T)
    x = np.array([[0x7F81, 0xFFC3], [0x0001, 0x8000]], np.uint16)
    got = dma_transpose(np.zeros((2, 2), np.uint16), [[2, 2], [1, 2]], x, [[2, 2], [1, 2]])
    assert np.array_equal(got, x.T)
    with pytest.raises(ValueError, match="only 2-byte and 4-byte"):
        dma_transpose(
            np.zeros((2, 2), np.uint8), [[2, 2], [1, 2]], x.astype(np.uint8), [[2, 2], [1, 2]]
        )


def test_read_add_write_fp32_and_bf16():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((4, 8)).astype(np.float32)
    b = rng.standard_normal((4, 8)).astype(np.float32)
    got = dma_add(b, [[8, 4], [1, 8]], a, [[8, 4], [1, 8]])
    assert np.array_equal(got.view(np.uint32), fp32_add(b, a).view(np.uint32))
    ab, bb = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
    got = dma_add(bb, [[8, 4], [1, 8]], ab, [[8, 4], [1, 8]])
    # through FP32 (exact widening, one RNE add), then RNE to BF16
    want = (bb.astype(np.float32) + ab.astype(np.float32)).astype(ml_dtypes.bfloat16)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
    # a destination element visited twice gets both adds, in loop order
    one = np.ones(3, np.float32)
    got = dma_add(np.zeros((1, 1), np.float32), [[1, 1], [0, 3]], one, [[1, 3]])
    assert got[0, 0] == 3.0
    with pytest.raises(ValueError, match="same dtype"):
        dma_add(b, [[8, 4], [1, 8]], ab, [[8, 4], [1, 8]])


def test_read_add_write_descriptor_matches_the_nki_level():
    rng = np.random.default_rng(6)
    mem = random_memories(rng, GEO)
    # keep the operands finite: small normal numbers in both tensors
    vals = rng.standard_normal(16 * 16).astype(np.float32).view(np.uint8)
    mem.sbuf[:, :64] = vals.reshape(16, 64)
    mem.hbm[:1024] = rng.standard_normal(256).astype(np.float32).view(np.uint8)
    src = Side(Space.HBM, 0, row=16, extent=256, pattern=[[16, 16], [1, 16]])
    dst = Side(Space.SBUF, 0, row=16, extent=256, pattern=[[16, 16], [1, 16]])
    out, err, msg = execute(Descriptor(Op.ADD, src, dst, AddDtype.FP32), GEO, mem)
    assert err == Error.NONE, msg
    b = _sbuf_tensor(mem, 0, 0, (16, 16), np.float32)
    a = _hbm_tensor(mem, 0, (16, 16), np.float32)
    assert np.array_equal(
        _sbuf_tensor(out, 0, 0, (16, 16), np.float32).view(np.uint32),
        fp32_add(b, a).view(np.uint32),
    )


def test_dynamic_offsets_read_from_the_sbuf():
    rng = np.random.default_rng(7)
    mem = random_memories(rng, GEO)
    # scalar offset 3 (rows of 8 elements) at partition 15, byte 0
    mem.sbuf[15, 0:4] = np.array([3], "<i4").view(np.uint8)
    src = Side(
        Space.HBM,
        0,
        row=8,
        extent=64,
        pattern=[[8, 2], [1, 8]],
        indirect=Indirect("scalar", 15, 0, 8),
    )
    dst = Side(Space.HBM, 2048, row=8, extent=16, pattern=[[8, 2], [1, 8]])
    out, err, msg = execute(Descriptor(Op.COPY, src, dst), GEO, mem)
    assert err == Error.NONE, msg
    assert np.array_equal(out.hbm[2048 : 2048 + 64], mem.hbm[3 * 32 : 3 * 32 + 64])
    # vector offsets: rows 5, 1, 6 of an HBM [8, 8] tensor, indices in partitions 0..2, byte 8
    mem.sbuf[0:3, 8:12] = np.array([[5], [1], [6]], "<i4").view(np.uint8)
    src = Side(
        Space.HBM, 0, row=8, extent=64, pattern=[[8, 3], [1, 8]], indirect=Indirect("vector", 0, 8)
    )
    dst = Side(Space.HBM, 2048, row=8, extent=24, pattern=[[8, 3], [1, 8]])
    out, err, msg = execute(Descriptor(Op.COPY, src, dst), GEO, mem)
    assert err == Error.NONE, msg
    rows = mem.hbm[:256].reshape(8, 32)
    assert np.array_equal(out.hbm[2048 : 2048 + 96].reshape(3, 32), rows[[5, 1, 6]])
    # an index outside the tensor: an error, nothing written
    mem.sbuf[1, 8:12] = np.array([8], "<i4").view(np.uint8)
    out, err, msg = execute(Descriptor(Op.COPY, src, dst), GEO, mem)
    assert err == Error.INDIRECT and "vector offset 8" in msg
    assert out is mem


def test_dynamic_offsets_scalar_in_the_sbuf_and_the_rules_after_reading():
    """A scalar offset on an SBUF side moves the access by value x stride elements (rows and
    inside a row); a transpose takes no vector offset; the overlap rule holds for the boxes the
    values make (the destination read through its offsets)."""
    rng = np.random.default_rng(9)
    mem = random_memories(rng, GEO)
    mem.sbuf[2, 16:20] = np.array([5], "<i4").view(np.uint8)  # 5 x stride 4 = row 2, element 1
    src = Side(Space.SBUF, 64, 8, 32, [[8, 2], [1, 4]], 4, 0, 4, Indirect("scalar", 2, 16, 4))
    dst = Side(Space.HBM, 0, 4, 8, [[4, 2], [1, 4]], 4)
    out, err, msg = execute(Descriptor(Op.COPY, src, dst), GEO, mem)
    assert err == Error.NONE, msg
    # partitions 4 + 2 and 4 + 3, elements 4.. of the row (4 x 5 = 20 = row 2, element 4)
    want = mem.sbuf[6:8, 64 + 16 : 64 + 32]
    assert np.array_equal(out.hbm[:32].reshape(2, 16), want)
    # a vector offset on a transpose's source: a gather is a copy
    mem.sbuf[0:2, 0:4] = np.array([[0], [1]], "<i4").view(np.uint8)
    vec = Side(Space.HBM, 0, 4, 16, [[4, 2], [1, 4]], 4, indirect=Indirect("vector", 0, 0))
    tdst = Side(Space.SBUF, 0, 2, 8, [[2, 4], [1, 2]], 4, 0, 0)
    err, msg = check(Descriptor(Op.TRANSPOSE, vec, tdst), GEO, mem.sbuf)
    assert err == Error.SHAPE and "no vector offset" in msg
    # rows 0 and 3 of an SBUF tensor of 4 rows at partition 8: the box is partitions 8..11
    mem.sbuf[0:2, 0:4] = np.array([[0], [3]], "<i4").view(np.uint8)
    vsrc = Side(Space.SBUF, 0, 4, 16, [[4, 2], [1, 4]], 4, 0, 8, Indirect("vector", 0, 0))
    for part, code in ((10, Error.OVERLAP), (12, Error.NONE)):
        vdst = Side(Space.SBUF, 0, 4, 8, [[4, 2], [1, 4]], 4, 0, part)
        got = check(Descriptor(Op.COPY, vsrc, vdst), GEO, mem.sbuf)
        assert (got[0] if got else Error.NONE) == code, (part, got)


@pytest.mark.parametrize(
    "desc, code, text",
    [
        (
            Descriptor(
                Op.COPY,
                Side(Space.HBM, 0, 4, 16, [[4, 4], [1, 4]], esize=3),
                Side(Space.HBM, 64, 4, 16, [[4, 4], [1, 4]], esize=3),
            ),
            Error.ELEMENT_SIZE,
            "element size 3",
        ),
        (
            Descriptor(
                Op.TRANSPOSE,
                Side(Space.HBM, 0, 4, 16, [[4, 4], [1, 4]], esize=1),
                Side(Space.SBUF, 0, 4, 16, [[4, 4], [1, 4]], esize=1),
            ),
            Error.ELEMENT_SIZE,
            "only 2-byte and 4-byte",
        ),
        (
            Descriptor(
                Op.ADD,
                Side(Space.HBM, 0, 4, 16, [[4, 4], [1, 4]], esize=2),
                Side(Space.SBUF, 0, 4, 16, [[4, 4], [1, 4]], esize=2),
                AddDtype.FP32,
            ),
            Error.ELEMENT_SIZE,
            "fp32 needs 4-byte",
        ),
        (
            Descriptor(
                Op.ADD,
                Side(Space.SBUF, 0, 4, 16, [[4, 4], [1, 4]]),
                Side(Space.HBM, 0, 4, 16, [[4, 4], [1, 4]]),
            ),
            Error.SPACE,
            "SBUF only",
        ),
        (
            Descriptor(
                Op.TRANSPOSE,
                Side(Space.HBM, 0, 4, 16, [[4, 4], [1, 4]]),
                Side(Space.SBUF, 0, 4, 16, [[4, 2], [1, 8]]),
            ),
            Error.SHAPE,
            "must be \\[A, B\\] and \\[B, A\\]",
        ),
        (
            Descriptor(
                Op.COPY,
                Side(Space.HBM, 0, 4, 16, [[4, 4], [1, 4]]),
                Side(Space.SBUF, 0, 4, 16, [[4, 3], [1, 4]]),
            ),
            Error.SHAPE,
            "16 elements, dst 12",
        ),
        (
            Descriptor(
                Op.COPY,
                Side(Space.HBM, 0, 4, 16, [[8, 2], [1, 4]]),
                Side(Space.SBUF, 0, 4, 16, [[8, 2], [1, 4]]),
            ),
            Error.PARTITION_STEP,
            "partition step 8",
        ),
        (
            Descriptor(
                Op.COPY,
                Side(Space.HBM, 0, 4, 16, [[4, 4], [1, 4]]),
                Side(Space.SBUF, 0, 4, 16 * 4, [[4, 4], [1, 4]], partition=2),
            ),
            Error.TENSOR,
            "partitions \\[2, 18\\)",
        ),
        (
            Descriptor(
                Op.COPY,
                Side(Space.HBM, 4088, 4, 16, [[4, 4], [1, 4]]),
                Side(Space.SBUF, 0, 4, 16, [[4, 4], [1, 4]]),
            ),
            Error.TENSOR,
            "outside the device memory",
        ),
        (
            Descriptor(
                Op.COPY,
                Side(Space.HBM, 0, 4, 16, [[4, 4], [1, 4]]),
                Side(Space.SBUF, 248, 4, 16, [[4, 4], [1, 4]]),
            ),
            Error.TENSOR,
            "partition size 256",
        ),
        (
            Descriptor(
                Op.COPY,
                Side(Space.HBM, 2, 4, 16, [[4, 4], [1, 4]]),
                Side(Space.SBUF, 0, 4, 16, [[4, 4], [1, 4]]),
            ),
            Error.TENSOR,
            "not aligned to its 4-byte elements",
        ),
        (
            Descriptor(
                Op.COPY,
                Side(Space.HBM, 0, 4, 16, [[4, 4], [1, 4]]),
                Side(Space.SBUF, 0, 4, 32, [[4, 4], [1, 4]], offset=2),
            ),
            Error.BOUNDS,
            "leaves its partition row",
        ),
        (
            Descriptor(
                Op.COPY,
                Side(Space.HBM, 0, 4, 16, [[4, 4], [-1, 4]]),
                Side(Space.SBUF, 0, 4, 16, [[4, 4], [1, 4]]),
            ),
            Error.BOUNDS,
            "outside the tensor",
        ),
        (
            Descriptor(
                Op.COPY,
                Side(Space.SBUF, 0, 8, 32, [[8, 2], [1, 8]]),
                Side(Space.SBUF, 0, 8, 32, [[8, 2], [1, 8]], offset=8),
            ),
            Error.OVERLAP,
            "partitions \\[0, 2\\), bytes \\[0, 32\\) and the destination's partitions \\[1, 3\\)",
        ),
    ],
)
def test_every_rule_is_an_error_that_writes_nothing(desc, code, text):
    rng = np.random.default_rng(8)
    mem = random_memories(rng, GEO)
    got = check(desc, GEO, mem.sbuf)
    assert got is not None and got[0] == code, got
    assert re.search(text, got[1]), got[1]
    out, err, _ = execute(desc, GEO, mem)
    assert err == code and out is mem


def test_negative_steps_walk_backwards():
    rng = np.random.default_rng(9)
    mem = random_memories(rng, GEO)
    # reverse each row of an HBM [4, 8] int32 tensor into SBUF
    src = Side(Space.HBM, 0, row=8, extent=32, pattern=[[8, 4], [-1, 8]], offset=7)
    dst = Side(Space.SBUF, 0, row=8, extent=32, pattern=[[8, 4], [1, 8]])
    out, err, msg = execute(Descriptor(Op.COPY, src, dst), GEO, mem)
    assert err == Error.NONE, msg
    h = _hbm_tensor(mem, 0, (4, 8), np.int32)
    assert np.array_equal(_sbuf_tensor(out, 0, 0, (4, 8), np.int32), h[:, ::-1])


def test_random_copies_agree_with_the_nki_level():
    """Random source patterns (1-5 entries, negative and zero steps) in a device-memory tensor,
    copied into SBUF rows: the descriptor's bytes equal the NKI-level view, and nothing outside
    the destination changes."""
    rng = np.random.default_rng(10)
    for _ in range(200):
        mem = random_memories(rng, GEO)
        r, c = int(rng.integers(1, 9)), int(rng.integers(1, 17))
        pat, off = _random_pattern(rng, (r, c))
        n = int(np.prod([m for _, m in pat]))
        parts = next(p for p in range(min(n, GEO.partitions), 0, -1) if n % p == 0)
        row = n // parts
        if row * 4 > GEO.partition_bytes:
            continue
        src = Side(Space.HBM, 128, row=c, extent=r * c, pattern=pat, offset=off)
        dst = Side(Space.SBUF, 0, row=row, extent=n, pattern=[[row, parts], [1, row]])
        out, err, msg = execute(Descriptor(Op.COPY, src, dst), GEO, mem)
        assert err == Error.NONE, msg
        want = ap_view(_hbm_tensor(mem, 128, (r, c), np.uint32), AccessPattern(pat, off))
        got = _sbuf_tensor(out, 0, 0, (parts, row), np.uint32)
        assert np.array_equal(got.reshape(-1), want.reshape(-1))
        mask = np.ones_like(mem.sbuf, bool)
        mask[:parts, : row * 4] = False
        assert np.array_equal(out.sbuf[mask], mem.sbuf[mask]) and np.array_equal(out.hbm, mem.hbm)


def _copy(n, parts=16):
    return Descriptor(
        Op.COPY,
        Side(Space.HBM, 0, n, parts * n, [(n, parts), (1, n)], 4),
        Side(Space.SBUF, 0, n, parts * n, [(n, parts), (1, n)], 4),
    )


@pytest.mark.parametrize(
    "outstanding, latency, burst",
    [(16, 6, 1), (9, 6, 1), (4, 1, 1), (8, 6, 1), (4, 5, 1), (8, 6, 16), (1, 6, 4), (2, 9, 2)],
)
def test_timing_of_a_long_copy(outstanding, latency, burst):
    """The timing model's steady state (the RTL's cycles are checked against the model in
    tests/test_hdl_dma.py): a copy of whole words reads bursts of ``burst`` words and issues a
    word per cycle when the reads in flight cover the loop (``outstanding x burst >= latency +
    2 + burst``), and then takes exactly ``overhead + 4`` cycles to start, one per word and
    ``latency + 4`` to drain; otherwise it streams at ``outstanding x burst / (latency + 2 +
    burst)`` words per cycle (:func:`bandwidth_cycles`)."""
    from ncrtl.model.dma.timing import EngineTiming, bandwidth_cycles, transfer_cycles

    geo = Geometry(16, 4096, 1 << 20)
    mem = Memories(np.zeros((16, 4096), np.uint8), np.zeros(1 << 20, np.uint8))
    timing = EngineTiming(overhead=10, outstanding=outstanding, read_latency=latency, burst=burst)
    t = transfer_cycles(_copy(1024), geo, mem, timing)
    words = 16 * 1024 * 4 // 16
    assert (t.error, t.start, t.reads, t.writes) == (0, 14, words, words)
    if outstanding * burst >= latency + 2 + burst:
        assert t.cycles == t.start + words + latency + 4
    else:
        want = (latency + 2 + burst) / (outstanding * burst)
        assert (t.cycles - t.start) / words == pytest.approx(want, rel=3e-3)
    assert bandwidth_cycles(words, timing) == pytest.approx(t.cycles - t.start, rel=3e-3)


def test_bursts_follow_the_span_and_stop_at_their_boundary():
    """A device-memory read is a burst from a run's word to the end of its contiguous span, at
    most ``burst`` words, never across a ``burst``-word boundary; a burst length the AXI4 rules
    forbid is refused naming the rule."""
    from ncrtl.model.dma.timing import EngineTiming, burst_beats, check_burst

    assert burst_beats(0, 64, 16, 16) == 4
    assert burst_beats(8, 64, 16, 16) == 5  # starts mid-word: 5 words hold 64 bytes
    assert burst_beats(16 * 14, 1024, 16, 16) == 2  # 2 words to the boundary
    assert burst_beats(16 * 16, 1024, 16, 16) == 16
    assert burst_beats(4, 2, 16, 16) == 1
    assert check_burst(256, 16) == 256
    with pytest.raises(ValueError, match="4096-byte boundary: at most 64 beats"):
        check_burst(128, 64)
    with pytest.raises(ValueError, match="power of two from 1 to 256"):
        EngineTiming(burst=3)
    with pytest.raises(TypeError, match="burst must be an int"):
        check_burst(2.0, 16)


def test_timing_of_the_checks():
    """A broken rule completes in cycle 2; a dynamic offset costs its documented check cycles
    before the overhead (docs/dma.md): per side without one a cycle; with one a cycle to
    start, the reads and a cycle after the last, a cycle for its range (and ``part_bits + 1``
    for an SBUF scalar's division), a cycle for the bounds; then a cycle for the overlap."""
    from ncrtl.model.dma.timing import EngineTiming, transfer_cycles

    geo = Geometry(16, 4096, 1 << 20)
    sbuf = np.zeros((16, 4096), np.uint8)
    sbuf[:, 0:4] = np.arange(16, dtype="<i4").view(np.uint8).reshape(16, 4)[::-1]
    mem = Memories(sbuf, np.zeros(1 << 20, np.uint8))
    timing = EngineTiming(overhead=7, part_bits=4)
    base = transfer_cycles(_copy(16), geo, mem, timing)
    assert base.start == 7 + 4
    bad = _copy(16)
    bad = Descriptor(bad.op, bad.src, Side(Space.SBUF, 0, 16, 16 * 16, [(16, 16), (1, 17)], 4))
    t = transfer_cycles(bad, geo, mem, timing)
    assert (t.cycles, t.error) == (2, Error.SHAPE)
    c = _copy(16)
    # a scalar in the device memory (value 15 at partition 0): the source starts at row 15
    scalar = Indirect("scalar", 0, 0, 16)
    one = Descriptor(
        Op.COPY,
        Side(Space.HBM, 0, 16, 16 * 16, [(16, 1), (1, 16)], 4, indirect=scalar),
        Side(Space.SBUF, 0, 16, 16 * 16, [(16, 1), (1, 16)], 4),
    )
    t = transfer_cycles(one, geo, mem, timing)
    assert t.start == base.start + (1 + 2 + 1 + 1) + 1 + 1
    # the same scalar into the SBUF: the division too
    two = Descriptor(
        Op.COPY,
        Side(Space.HBM, 0, 16, 16 * 16, [(16, 1), (1, 16)], 4),
        Side(Space.SBUF, 0, 16, 16 * 16, [(16, 1), (1, 16)], 4, indirect=scalar),
    )
    t2 = transfer_cycles(two, geo, mem, timing)
    assert t2.start == base.start + 1 + (1 + 2 + 1 + 5 + 1) + 1
    # a vector of 16 values (rows 15 .. 0) from the SBUF partitions 0 .. 15
    vec = Descriptor(
        Op.COPY,
        Side(Space.HBM, 0, 16, 16 * 16, [(16, 16), (1, 16)], 4, indirect=Indirect("vector", 0, 0)),
        c.dst,
    )
    t3 = transfer_cycles(vec, geo, mem, timing)
    assert t3.start == base.start + (1 + 17 + 1 + 1) + 1 + 1
    # a value outside the tensor: INDIRECT after its range check
    far = Descriptor(
        Op.COPY,
        Side(Space.HBM, 0, 16, 8 * 16, [(16, 1), (1, 16)], 4, indirect=scalar),
        Side(Space.SBUF, 0, 16, 16 * 16, [(16, 1), (1, 16)], 4),
    )
    t = transfer_cycles(far, geo, mem, timing)
    assert (t.cycles, t.error) == (2 + 1 + 2 + 1, Error.INDIRECT)
