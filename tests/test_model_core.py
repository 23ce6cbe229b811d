"""``ncrtl.model.core``: Tensor Engine matmuls written into PSUM, checked against the composition of
the two proven goldens done by hand (chunk results folded with ``fp32_add`` / BF16 rounding)."""

import ml_dtypes
import numpy as np
import pytest

from ncrtl.model.core import chunk_flags, nc_matmul
from ncrtl.model.fp import fp32_add, fp32_to_bf16
from ncrtl.model.fp.xorwow import Xorwow
from ncrtl.model.psum import Dtype, Geometry, Psum, Rounding, Write
from ncrtl.model.tensor_engine.matmul import matmul, matmul_mx_rows
from ncrtl.model.vector_engine import quantize_mx


def _chunks(rng, count, k, m, n, dtype=ml_dtypes.bfloat16):
    return [
        (rng.standard_normal((k, m)).astype(dtype), rng.standard_normal((k, n)).astype(dtype))
        for _ in range(count)
    ]


def test_chunk_flags():
    assert [chunk_flags(i, 4) for i in range(4)] == [1, 0, 0, 2]
    assert chunk_flags(0, 1) == 3
    with pytest.raises(ValueError, match="chunk index 4 is outside 0..3"):
        chunk_flags(4, 4)
    with pytest.raises(ValueError, match="chunk count must be a positive integer"):
        chunk_flags(0, 0)


@pytest.mark.parametrize("count", [1, 2, 4])
def test_fp32_group_is_the_fold_of_chunk_results(count):
    rng = np.random.default_rng(count)
    psum = Psum(Geometry(8, 4, 128))
    parts = _chunks(rng, count, 8, 8, 20)
    done = [
        nc_matmul(psum, Write(3, 5, 20, Dtype.FP32, flags=chunk_flags(i, count)), s, x, rows=8)
        for i, (s, x) in enumerate(parts)
    ]
    assert done == [None] * (count - 1) + [3]
    want = matmul(*parts[0], rows=8, cols=8)
    for s, x in parts[1:]:
        want = fp32_add(want, matmul(s, x, rows=8, cols=8))
    np.testing.assert_array_equal(
        psum.read(3, 5, 20, Dtype.FP32).view(np.uint32), want.view(np.uint32)
    )


def test_bf16_sr_group_draws_one_value_per_partition_per_beat():
    rng = np.random.default_rng(9)
    psum = Psum(Geometry(8, 2, 64), seed=11)
    parts = _chunks(rng, 3, 8, 8, 6)
    for i, (s, x) in enumerate(parts):
        nc_matmul(psum, Write(1, 0, 6, Dtype.BF16, Rounding.SR, chunk_flags(i, 3)), s, x, rows=8)
    gen = Xorwow([11 + p for p in range(8)])
    acc = None
    for s, x in parts:
        r = matmul(s, x, rows=8, cols=8)  # [M = partitions, N]
        out = np.empty_like(r, dtype=ml_dtypes.bfloat16)
        for j in range(r.shape[1]):  # one draw per partition per beat
            v = r[:, j] if acc is None else fp32_add(acc[:, j].astype(np.float32), r[:, j])
            out[:, j] = fp32_to_bf16(v, "sr", gen.next_u16())
        acc = out
    np.testing.assert_array_equal(
        psum.read(1, 0, 6, Dtype.BF16).view(np.uint16), acc.view(np.uint16)
    )


def test_column_tile_writes_zero_lanes_outside_the_tile():
    rng = np.random.default_rng(2)
    psum = Psum(Geometry(128, 2, 64))
    s = rng.standard_normal((16, 32)).astype(ml_dtypes.bfloat16)
    x = rng.standard_normal((16, 4)).astype(ml_dtypes.bfloat16)
    nc_matmul(psum, Write(0, 0, 4), s, x, tile_position=(0, 32), tile_size=(128, 32))
    got = psum.read(0, 0, 4, Dtype.FP32)
    np.testing.assert_array_equal(got[32:64].view(np.uint32), matmul(s, x).view(np.uint32))
    assert not got[:32].any() and not got[64:].any()


def test_bad_input_names_the_rule_and_leaves_psum_alone():
    rng = np.random.default_rng(3)
    psum = Psum(Geometry(8, 2, 64))
    ((s, x),) = _chunks(rng, 1, 8, 8, 4)
    before = psum.mem.copy()
    with pytest.raises(ValueError, match="must be a Write of n=4 vectors"):
        nc_matmul(psum, Write(0, 0, 5), s, x, rows=8)
    with pytest.raises(ValueError, match="8 partitions"):
        nc_matmul(psum, Write(0, 0, 4), s, x, rows=8, cols=16)
    with pytest.raises(ValueError, match="no open accumulation group"):
        nc_matmul(psum, Write(0, 0, 4, flags=0), s, x, rows=8)
    with pytest.raises(ValueError, match="K=9"):
        nc_matmul(
            psum,
            Write(0, 0, 4),
            np.zeros((9, 8), ml_dtypes.bfloat16),
            np.zeros((9, 4), ml_dtypes.bfloat16),
            rows=8,
        )
    with pytest.raises(ValueError, match="must be a ncrtl.model.psum.Psum"):
        nc_matmul(object(), Write(0, 0, 4), s, x)
    np.testing.assert_array_equal(psum.mem, before)


def test_mx_into_bf16_psum_with_n_1024():
    """An MX matmul (per-row scales) into a BF16 group: the golden MX vectors rounded by PSUM's
    BF16 path, N = 1024 filling a 2 KiB bank row; N = 1024 into FP32 is refused, PSUM unchanged."""
    rng = np.random.default_rng(4)
    psum = Psum(Geometry(4, 2, 2048))
    s = rng.integers(0, 16, (4, 4, 4)).astype(np.uint8).view(ml_dtypes.float4_e2m1fn)
    x = rng.integers(0, 256, (4, 1024, 4)).astype(np.uint8).view(ml_dtypes.float8_e5m2)
    x = np.where(np.isfinite(x.astype(np.float32)), x, x.dtype.type(1.0))
    ss = rng.integers(120, 134, (4, 4)).astype(np.uint8)
    xs = rng.integers(120, 134, (4, 1024)).astype(np.uint8)
    mx = dict(stationary_scale=ss, moving_scale=xs, rows=4, tile_unit=4)
    before = psum.mem.copy()
    with pytest.raises(ValueError, match=r"N=1024 must be in 1..512 \(mx with an FP32 result"):
        nc_matmul(psum, Write(0, 0, 1024, Dtype.FP32), s, x, **mx)
    with pytest.raises(ValueError, match="must be given together"):
        nc_matmul(psum, Write(0, 0, 1024, Dtype.BF16), s, x, stationary_scale=ss, rows=4)
    np.testing.assert_array_equal(psum.mem, before)
    assert nc_matmul(psum, Write(1, 0, 1024, Dtype.BF16), s, x, **mx) == 1
    want = matmul_mx_rows(s, x, ss, xs, rows=4, cols=4, tile_unit=4, psum_dtype="bf16")
    np.testing.assert_array_equal(
        psum.read(1, 0, 1024, Dtype.BF16).view(np.uint16),
        fp32_to_bf16(want, "rne").view(np.uint16),
    )


def test_mx_chain_from_bf16_tiles():
    """QuantizeMX output in SBUF layout feeds the MX matmul through mx_row_scales: the chain the
    ``ncrtl sim matmul --dtype mxfp8_*`` command runs on the RTL."""
    from ncrtl.model.tensor_engine.matmul import matmul_mx, mx_row_scales

    rng = np.random.default_rng(6)
    src_s = rng.standard_normal((32, 8)).astype(ml_dtypes.bfloat16)
    src_x = rng.standard_normal((32, 12)).astype(ml_dtypes.bfloat16)
    s, ss = quantize_mx(src_s, "fp8_e4m3fn")
    x, xs = quantize_mx(src_x, "fp4_e2m1fn")
    psum = Psum(Geometry(32, 1, 64))
    nc_matmul(
        psum,
        Write(0, 0, 3),
        s,
        x,
        stationary_scale=mx_row_scales(ss, 32),
        moving_scale=mx_row_scales(xs, 32),
        rows=32,
    )
    got = psum.read(0, 0, 3, Dtype.FP32)[:2]
    want = matmul_mx(s, x, ss, xs, rows=32, cols=32)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
