"""The sparse matmul golden (``matmul_sparse``) against an exact rational reference, against the
dense golden on the decompressed stationary, its tag and compression helpers and its rules.

The reference picks each PE's moving element from the tag nibbles written out here, not with the
golden's code, and computes every chain one element at a time with ``tests/exact_ref.py``.
"""

import zlib

import ml_dtypes
import numpy as np
import pytest

from ncrtl.model.modes import SPARSE_MODES, SPARSE_RATIOS, get_mode
from ncrtl.model.tensor_engine import InstructionError, matmul, result_bits
from ncrtl.model.tensor_engine.isa import Error, Instruction, Mode, Op, check, decode, encode
from ncrtl.model.tensor_engine.sparse import (
    compress,
    decompress,
    expand_tags,
    matmul_sparse,
    pack_tags,
    sparse_instructions,
    squeeze_tags,
    unpack_tags,
)
from tests.exact_ref import dot_add_reference, exact_operand
from tests.test_model_tensor_engine import DTYPES, assert_bits_equal, bits_of, kw, operands

bf = ml_dtypes.bfloat16

PAIRS = [(a, b) for mode in SPARSE_MODES for a in mode.formats_s for b in mode.formats_m]


def random_tags(rng, k, m, r):
    """Physical tags ``[k, m]``: 4 different positions of each group, in a random order."""
    span = 4 * r
    out = np.zeros((k, m), dtype=np.int64)
    for g in range(k // 4):
        for col in range(m):
            pos = rng.choice(span, size=4, replace=False)
            out[4 * g : 4 * g + 4, col] = ((pos // r) << 2) | (pos % r)
    return out


def reference(moving, s, phys, fs, fm):
    """The chains one element at a time: PE (p, m) multiplies s[p, m] by the moving element in
    partition 4 (p // 4) + (tag >> 2), slot tag & 3."""
    sb, xb = bits_of(s, fs), bits_of(moving, fm)
    k, m_n = s.shape
    n_n = moving.shape[2]
    out = np.zeros((m_n, n_n), dtype=np.uint32)
    for m in range(m_n):
        for n in range(n_n):
            p = 0
            for row in range(k):
                t = int(phys[row, m])
                part, slot = 4 * (row // 4) + (t >> 2), t & 3
                sv = exact_operand(sb[row, m], fs)
                xv = exact_operand(xb[part, slot, n], fm)
                p = dot_add_reference(p, [sv], [xv])
            out[m, n] = p
    return out


@pytest.mark.parametrize("fs,fm", PAIRS)
@pytest.mark.parametrize("specials", [0.0, 0.08])
def test_sparse_matches_exact_chain(fs, fm, specials):
    rng = np.random.default_rng(zlib.crc32(f"sparse {fs} {fm} {specials}".encode()))
    r = int(rng.choice(SPARSE_RATIOS))
    k, m, n = 8, 5, 3
    s = operands(rng, fs, (k, m), specials)
    x = operands(rng, fm, (k * r, n), specials).reshape(k, r, n)
    phys = random_tags(rng, k, m, r)
    got = matmul_sparse(x, s, pack_tags(phys), r, rows=8, cols=8, **kw(fs, fm))
    assert got.dtype == np.float32 and got.shape == (m, n)
    assert_bits_equal(result_bits(got), reference(x, s, phys, fs, fm))


def pruned(rng, fmt, k_dense, m, r, fill=1.0):
    """A dense stationary with at most 4 non-zeros per group of 4r rows (random counts)."""
    d = operands(rng, fmt, (k_dense, m))
    bits = bits_of(d, fmt)
    span = 4 * r
    for g in range(k_dense // span):
        for col in range(m):
            keep = rng.choice(span, size=int(rng.integers(0, 5)), replace=False)
            drop = np.setdiff1d(np.arange(span), keep)
            bits[g * span + drop, col] = 0
    f = "fp32" if fmt == "tf32" else fmt
    from ncrtl.model.fp import from_bits, get_format

    return from_bits(bits.astype(get_format(f).storage_dtype), f)


@pytest.mark.parametrize("r", SPARSE_RATIOS)
@pytest.mark.parametrize("fmt", ["bf16", "fp16", "tf32", "fp8_e4m3", "fp8_e5m2"])
def test_sparse_equals_dense_on_the_decompressed_stationary(r, fmt):
    """compress -> matmul_sparse equals the dense golden over 4r rows per group, bit for bit
    but a zero's sign, with a finite moving (the contract's condition)."""
    rng = np.random.default_rng(zlib.crc32(f"dense {r} {fmt}".encode()))
    k, m, n = 16, 7, 6
    dense = pruned(rng, fmt, k * r, m, r)
    x = operands(rng, fmt, (k * r, n), raw=0.0)
    values, tag = compress(dense, r)
    assert values.dtype == dense.dtype and tag.dtype == np.uint16 and tag.shape == (k, 2)
    got = matmul_sparse(x.reshape(k, r, n), values, tag, r, rows=16, cols=8, **kw(fmt, fmt))
    want = matmul(dense, x, rows=255, cols=8, **kw(fmt, fmt))
    g, w = result_bits(got), result_bits(want)
    zero = (g & 0x7FFFFFFF) == 0
    assert_bits_equal(np.where(zero, g & 0x7FFFFFFF, g), np.where(zero, w & 0x7FFFFFFF, w))
    assert (((w & 0x7FFFFFFF) == 0) == zero).all()


def test_where_sparse_and_dense_part():
    """The two exceptions the contract names: a moving Inf met by a dropped zero (NaN in the
    dense chain only) and a -0 psum followed by a dropped +0 * x (+0 in the dense chain)."""
    r = 2
    dense = np.zeros((8, 1), bf)
    dense[0, 0] = 1.0
    values, tag = compress(dense, r)
    x = np.ones((8, 1), bf)
    x[5, 0] = np.inf  # position 5 is a zero of the stationary
    got = matmul_sparse(x.reshape(4, r, 1), values, tag, r, rows=4, cols=4)
    want = matmul(dense, x, rows=8, cols=4)
    assert got[0, 0] == 1.0 and np.isnan(want[0, 0])
    # A group of 4 non-zeros whose chain ends at -0 (1 - 1 = +0, then a product below FP32's
    # least subnormal rounds to -0, then 1 * -0); the dense chain goes on with +0 * 1 = +0.
    dense = np.zeros((8, 1), bf)
    dense[:4, 0] = [1.0, -1.0, 2.0**-133, 1.0]
    x = np.ones((8, 1), bf)
    x[:4, 0] = [1.0, 1.0, -(2.0**-133), -0.0]
    values, tag = compress(dense, r)
    got = result_bits(matmul_sparse(x.reshape(4, r, 1), values, tag, r, rows=4, cols=4))
    want = result_bits(matmul(dense, x, rows=8, cols=4))
    assert got[0, 0] == 0x80000000 and want[0, 0] == 0x00000000


def test_tag_packing_and_positions():
    phys = np.array([[0x1, 0x2, 0x3, 0x4, 0xF]], dtype=np.int64)
    packed = pack_tags(phys)
    assert packed.dtype == np.uint16 and packed.shape == (1, 2)
    assert int(packed[0, 0]) == 0x4321 and int(packed[0, 1]) == 0x000F
    assert (unpack_tags(packed, 5) == phys).all()
    # positions: partition t // r of the group, element t % r (the seed's squeeze_tags)
    for r in SPARSE_RATIOS:
        span = 4 * r
        pos = np.array(
            [[0, span - 4, 0], [1, span - 3, r], [2, span - 2, 2 * r], [3, span - 1, 3 * r]]
        )
        tag = squeeze_tags(pos, r)
        assert (expand_tags(tag, r, 3) == pos).all()
        assert (unpack_tags(tag, 3) == ((pos // r) << 2 | pos % r)).all()
    assert (unpack_tags(squeeze_tags(np.array([[11]]), 3), 1) == [[(3 << 2) | 2]]).all()


def test_compress_with_a_mask_and_decompress():
    rng = np.random.default_rng(4)
    r, k, m = 3, 8, 5
    dense = pruned(rng, "bf16", k * r, m, r)
    mask = decompress(np.ones((k, m), bf), compress(dense, r)[1], r) != 0
    values, tag = compress(dense, r, mask=mask)
    assert (decompress(values, tag, r).view(np.uint16) == dense.view(np.uint16)).all()
    # kept positions ascend in every group, and the padding takes the first unkept positions
    pos = expand_tags(tag, r, m).reshape(k // 4, 4, m)
    assert (np.diff(pos, axis=1) > 0).all()
    empty = compress(np.zeros((12, 1), bf), r)
    assert (expand_tags(empty[1], r, 1)[:, 0] == [0, 1, 2, 3]).all()


@pytest.mark.parametrize(
    "dense,mask,match",
    [
        (np.ones((8, 2), bf), None, r"column 0, group 0 \(rows 0\.\.7\) holds non-zeros at"),
        (np.ones((7, 2), bf), None, r"K a multiple of 8"),
        (
            np.eye(8, 1, dtype=bf),
            np.eye(8, 1, k=-1, dtype=bool),
            r"stationary\[0, 0\] = .* non-zero outside the mask",
        ),
        (np.zeros((8, 1), bf), np.ones((8, 1), bool), r"mask keeps rows \[0, 1, 2, 3, 4"),
    ],
)
def test_compress_rejects_broken_patterns(dense, mask, match):
    with pytest.raises(InstructionError, match=match):
        compress(dense, 2, mask=mask)


def _args(k=8, m=4, n=3, r=2, dtype=bf):
    x = np.ones((k, r, n), dtype)
    s = np.ones((k, m), dtype)
    tag = squeeze_tags(np.tile(np.arange(4), k // 4)[:, None].repeat(m, axis=1), r)
    return x, s, tag, r


def _with(**change):
    x, s, tag, r = _args()
    out = dict(moving=x, stationary=s, tag=tag, compress_ratio=r)
    out.update(change)
    return out


SPARSE_ERRORS = [
    (_with(compress_ratio=1), r"compress_ratio 1 is not one the Tensor Engine has", Error.SPARSE),
    (_with(compress_ratio=True), r"compress_ratio True", Error.SPARSE),
    (_with(compress_ratio="2"), r"compress_ratio '2'", Error.SPARSE),
    (
        _with(moving=np.ones((8, 2, 3), np.float32), stationary=np.ones((8, 4), np.float32)),
        r"takes tf32, bf16, fp16, fp8 operands, not fp32 x fp32",
        Error.SPARSE,
    ),
    (_with(moving=np.ones((8, 4, 3), bf)), r"moving \[K, compress_ratio=2, N\]", Error.NONE),
    (_with(moving=np.ones((4, 2, 3), bf)), r"got stationary \(8, 4\)", Error.NONE),
    (
        _with(moving=np.ones((6, 2, 3), bf), stationary=np.ones((6, 4), bf)),
        r"sparse K=6 must be a multiple of 4",
        Error.K_RANGE,
    ),
    (_with(moving=np.ones((8, 2, 513), bf)), r"N=513 must be in 1\.\.512", Error.N_RANGE),
    (_with(stationary=np.ones((8, 9), bf)), r"M=9 must be in 1\.\.8", Error.M_RANGE),
    (_with(tag=np.zeros((8, 1), np.uint8)), r"tag must be uint16 \[8, 1\]", Error.NONE),
    (_with(tag=np.zeros((8, 2), np.uint16)), r"tag must be uint16 \[8, 1\]", Error.NONE),
    (
        _with(tag=np.full((8, 1), 0x3210, np.uint16)),
        r"tag\[0, 2\] = 2 selects element 2 .* elements 0\.\.1",
        Error.TAG,
    ),
    (
        _with(tag=np.full((8, 1), 0x4444, np.uint16)),
        r"tags \[4, 4, 4, 4\] of rows \[0, 1, 2, 3\] \(group 0\), column 0 repeat",
        Error.TAG,
    ),
]


@pytest.mark.parametrize("args,match,code", SPARSE_ERRORS)
def test_sparse_errors(args, match, code):
    with pytest.raises(InstructionError, match=match) as exc:
        matmul_sparse(**args, rows=8, cols=8)
    assert exc.value.error == code


def test_instructions_rules_and_words():
    x, s, tag, r = _args(k=128, m=128, n=512, r=4)
    ls, mm = sparse_instructions(x, s, np.zeros((128, 32), np.uint16), r)
    assert (ls.op, ls.mode, ls.sparse, ls.k, ls.m) == (Op.LS, Mode.BF16, 4, 128, 128)
    assert (mm.op, mm.n, mm.sparse) == (Op.MM, 512, 4)
    assert decode(encode(mm)) == mm and check(ls, 128, 128) is None
    assert check(mm, 128, 128, ls) is None
    # a dense MM on a sparse stationary, a sparse mode without sparse, a tiled sparse LS
    dense_mm = Instruction(Op.MM, Mode.BF16, k=128, m=128, n=8)
    assert check(dense_mm, 128, 128, ls)[0] == Error.MODE_MISMATCH
    for mode in ("fp32", "double_row", "mx"):
        bad = Instruction(Op.LS, Mode[mode.upper()], k=128, m=128, sparse=2)
        assert check(bad, 128, 128)[0] == Error.SPARSE, mode
        assert not get_mode(mode).sparse
    assert check(Instruction(Op.LS, Mode.BF16, k=128, m=128, sparse=5), 128, 128)[0] == Error.SPARSE
    tiled = Instruction(Op.LS, Mode.BF16, k=64, m=128, sparse=2, tile_rows=64)
    assert check(tiled, 128, 128)[0] == Error.MODE_COMBO


def test_full_size_sparse_fp8_matches_dense():
    """128 compressed rows x 128 x 512 at 4:16 (512 dense rows), FP8: one call."""
    rng = np.random.default_rng(7)
    r, k, m, n = 4, 128, 128, 512
    f8 = ml_dtypes.float8_e4m3
    dense = pruned(rng, "fp8_e4m3", k * r, m, r)
    x = (rng.standard_normal((k * r, n)) * 2).astype(np.float32).astype(f8)
    values, tag = compress(dense, r)
    got = matmul_sparse(x.reshape(k, r, n), values, tag, r)
    # The dense golden's K stops at the array's 255 rows: the dense chain over the 512 rows is
    # its float64 chain (proved equal to the exact one in test_model_tensor_engine.py).
    from ncrtl.model.fp import decode as fp_decode
    from ncrtl.model.tensor_engine.matmul import _chain_float64

    want = _chain_float64(fp_decode(dense, "fp8_e4m3"), fp_decode(x, "fp8_e4m3"))
    assert_bits_equal(result_bits(got), result_bits(want))
    assert DTYPES["fp8_e4m3"] is f8
