"""The golden's fast roads give the bits of its proven ones (docs/tensor_engine.md, "How the
golden computes a chain"; docs/kernels.md, the golden run): the float32 steps of a short-product
chain against ``fp32_dot_add`` and the rational reference, the float32 decoding, the memory of
checked calls, the golden run's strided views against its index road, and its program order."""

import zlib

import ml_dtypes
import numpy as np
import pytest

import ncrtl.nki as nki
from ncrtl.kernels import load
from ncrtl.model.fp import FORMATS, decode, decode_float32, from_bits, ops
from ncrtl.model.kernel import golden
from ncrtl.model.kernel.stream import Ref
from ncrtl.model.tensor_engine import InstructionError, matmul, result_bits
from ncrtl.model.tensor_engine.matmul import _precision, float32_steps
from tests.test_model_tensor_engine import (
    DTYPES,
    _dot_add_chain,
    assert_bits_equal,
    kw,
    operands,
    reference,
)

SHORT = [
    ("bf16", "bf16"),
    ("tf32", "tf32"),
    ("fp16", "fp16"),
    ("fp8_e4m3", "fp8_e5m2"),
    ("fp8_e5m2", "fp8_e5m2"),
]


def _as(fmt, values):
    return np.asarray(values, np.float32).astype(DTYPES[fmt])


@pytest.mark.parametrize("fs,fm", SHORT)
def test_float32_steps_equal_the_exact_chain(fs, fm):
    """Steps of ML-like data run in float32, steps that hold a product outside float32 (a
    subnormal-range product, one past the largest float32 that the psum cancels back into
    range) in float64, mixed along the chains; a psum that a float64 step leaves at -0 keeps
    it through float32 steps of -0 products; specials and zeros.  Bit for bit equal to the
    general road step by step, and a corner against the rational reference."""
    rng = np.random.default_rng(zlib.crc32(f"float32 steps {fs} {fm}".encode()))
    k, m, n = 40, 6, 9
    s = operands(rng, fs, (k, m), 0.05, raw=0.0)
    x = operands(rng, fm, (k, n), 0.05, raw=0.0)
    s[rng.random((k, m)) < 0.05] = 0
    wide = fs in ("bf16", "tf32")
    if wide:
        finite = np.isfinite(x[:, :2].astype(np.float32))
        x[:, :2] = np.where(finite, x[:, :2], _as(fm, 1.0))
        # column 0 by row 0: the psum -(2**128 - 2**120), then the product 2**128: 2**120 in
        # the exact chain, Inf were the product a float32
        big = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
        s[:2, 0], x[:2, 0] = _as(fs, [-big, 2.0**64]), _as(fm, [1.0, 2.0**64])
        s[2:, 0] = 0
        # column 1 by row 1: -2**-200 rounds to -0, then -0 products keep it (2**-100 is a
        # normal bf16 / tf32 value)
        s[2:4, 1], x[2:4, 1] = _as(fs, [-(2.0**-100), -0.0]), _as(fm, [2.0**-100, 1.0])
        s[4:, 1] = -0.0
        x[:, 1] = np.abs(x[:, 1].astype(np.float32)).astype(DTYPES[fm])
        x[:2, 1] = 0
    fast = float32_steps(
        decode_float32(s, fs), decode_float32(x, fm), _precision(fs) + _precision(fm)
    )
    assert fast.any()
    if wide:
        assert not fast.all()
    got = matmul(s, x, rows=64, cols=8, **kw(fs, fm))
    assert_bits_equal(result_bits(got), result_bits(_dot_add_chain(s, x, fs, fm)))
    if wide:
        assert got[0, 0] == np.float32(2.0**120)
        assert got[1, 1] == 0 and np.signbit(got[1, 1])
    corner = (slice(0, 6), slice(0, 3)), (slice(0, 6), slice(0, 3))
    s6, x6 = s[corner[0]], x[corner[1]]
    got = matmul(s6, x6, rows=64, cols=8, **kw(fs, fm))
    assert_bits_equal(result_bits(got), reference(s6, x6, fs, fm))


def test_fp32_chain_rounds_a_subnormal_sum_by_its_residual():
    """The FP32 chain's float64 sum converted alone is right except on an FP32 rounding
    boundary, where the TwoSum residual decides (``round_fp32_sum``).  In FP32's subnormal
    range the boundaries are not where a normal's are: psum ``2**-140 + 2**-149``, product
    ``-2**-150 (1 - 2**-46)``; the float64 sum is the midpoint ``2**-140 + 2**-150`` (the
    ``2**-196`` is below its last place) and converts to the even ``2**-140``, while the exact
    sum is above the midpoint: one rounding gives ``2**-140 + 2**-149``."""
    s = np.array([[(1 + 2.0**-9) * 2.0**-70], [-(1 + 2.0**-23) * 2.0**-75]], np.float32)
    x = np.array([[2.0**-70], [(1 - 2.0**-23) * 2.0**-75]], np.float32)
    got = matmul(s, x, rows=8, cols=8)
    assert got[0, 0] == np.float32(2.0**-140 + 2.0**-149)
    assert_bits_equal(result_bits(got), reference(s, x, "fp32", "fp32"))


def test_decode_float32_is_decode():
    """Every encoding of every format of at most 16 bits, and random FP32 / TF32 ones: the
    float32 decoding holds the exact value (NaN for NaN)."""
    rng = np.random.default_rng(3)
    for name, f in FORMATS.items():
        if f.container_bits <= 16:
            codes = np.arange(1 << f.bits, dtype=np.uint64)
        else:
            codes = rng.integers(0, 1 << 32, 100_000, dtype=np.uint64)
        arr = from_bits(codes.astype(f.storage_dtype), name)
        got = decode_float32(arr, name)
        assert got.dtype == np.float32
        with np.errstate(invalid="ignore"):
            got = got.astype(np.float64)
        with np.errstate(invalid="ignore"):  # signalling NaNs widen quietly
            want = decode(arr, name)
        nan = np.isnan(want)
        assert (np.isnan(got) == nan).all(), name
        assert (got[~nan].view(np.uint64) == want[~nan].view(np.uint64)).all(), name


def test_a_host_that_flushes_subnormals_is_refused(monkeypatch):
    """The float32 roads need IEEE gradual underflow: where the probe's subnormal products come
    out zero (FTZ / DAZ), the golden refuses instead of giving other bits."""
    monkeypatch.setattr(ops, "_PROBE", (np.zeros(2, np.float32), np.ones(2, np.float32)))
    s = np.ones((4, 4), ml_dtypes.bfloat16)
    with pytest.raises(RuntimeError, match="flushes subnormals"):
        matmul(s, s, rows=8, cols=8)


def test_a_call_is_checked_whatever_passed_before():
    """The rules remembered for a call's dtypes, shapes and arguments: a call that differs in
    any of them, the type of an array size included, is checked anew."""
    s = np.ones((4, 4), ml_dtypes.bfloat16)
    x = np.ones((4, 8), ml_dtypes.bfloat16)
    assert matmul(s, x, rows=8, cols=8)[0, 0] == 4
    for bad, rule in (
        (dict(rows=8.0, cols=8), "rows=8.0 must be an integer"),
        (dict(rows=True, cols=8), "rows=True must be an integer"),
        (dict(rows=8, cols=8, tile_unit=4.0), "tile_unit=4.0 must be a positive integer"),
        (dict(rows=8, cols=8, tile_position=5, tile_size=(4, 8)), "pair of integers"),
        (dict(rows=8, cols=8, perf_mode="double_row"), "double_row"),
    ):
        with pytest.raises(InstructionError, match=rule):
            matmul(s, x, **bad)
    with pytest.raises(InstructionError, match="same K"):
        matmul(s, x[:2])
    assert matmul(s, x, rows=8, cols=8, tile_position=[0, 0], tile_size=[8, 8])[0, 0] == 4


def _random_tensor(rng, space):
    """``(space, base, shape, dtype)`` of a random tensor of ``space``."""
    dtype = str(rng.choice(["bfloat16", "float32", "uint8"]))
    isz = {"bfloat16": 2, "float32": 4, "uint8": 1}[dtype]
    rows = int(rng.integers(1, 129)) if space != "hbm" else int(rng.integers(1, 40))
    cols = int(rng.integers(1, 48))
    limit = {"sbuf": 4096, "psum": 16384, "hbm": 65536}[space] - cols * isz * (
        rows if space == "hbm" else 1
    )
    base = int(rng.integers(0, limit)) // isz * isz
    return space, base, (rows, cols), dtype


def _random_ref(rng, tensor):
    """A random view of ``tensor``: rows stepped whole (or not), free steps of any sign, zero
    included, its dtype or its bytes; most inside the tensor, some breaking the access
    rules."""
    space, base, (rows, cols), dtype = tensor
    isz = {"bfloat16": 2, "float32": 4, "uint8": 1}[dtype]
    view = dtype if rng.random() < 0.8 else "uint8"
    row = cols * (isz if view != dtype else 1)
    inner = [(int(rng.integers(-3, 4)), int(rng.integers(1, 7))) for _ in range(rng.integers(1, 3))]
    lo = sum(min(0, s * (n - 1)) for s, n in inner)
    hi = sum(max(0, s * (n - 1)) for s, n in inner)
    n0 = int(rng.integers(1, rows + 1))
    r0 = int(rng.integers(0, rows - n0 + 1))
    c0 = int(rng.integers(-lo, max(row - hi, -lo + 1)))
    step0 = row
    if rng.random() < 0.1:
        step0 = int(rng.integers(0, 2 * row + 1))
    if rng.random() < 0.1:
        c0 = int(rng.integers(0, row))
    pattern = ((step0, n0),) + tuple(inner)
    return Ref(space, f"t{space}", base, (rows, cols), dtype, pattern, r0 * row + c0, view)


def _session(program, ins, refs, rng_seed):
    """Writes and reads of ``refs`` on a fresh state: what each returned or raised, and the
    memories at the end."""
    st = golden.CoreState(program, ins)
    rng = np.random.default_rng(rng_seed)
    log = []
    for i, ref in enumerate(refs):
        try:
            if i % 3 != 2:
                data = rng.integers(0, 256, ref.size * ref.element.itemsize, dtype=np.uint8)
                st.write(ref, data.view(ref.element.storage))
                log.append("w")
            else:
                log.append(st.read(ref).tobytes())
        except (ValueError, golden.KernelError) as e:
            log.append(f"{type(e).__name__}: {e}")
    return log, (st.sbuf, st.sbuf_written, st.psum.mem, st.psum_written, st.hbm, st.hbm_written)


def test_strided_views_read_and_write_as_the_indices_do(monkeypatch):
    """Views that are rows of their tensor are read and written through strided numpy views
    (a PSUM read through the banks it reaches alone): random views of SBUF, PSUM and device
    memory, negative and zero steps, several banks, reinterpreted dtypes, rules broken and
    bytes unwritten, give the same values, errors and memories as the index of every
    element."""
    e, k = load("matmul_tiled")
    ins = [np.zeros((128, 128), ml_dtypes.bfloat16), np.zeros((128, 512), ml_dtypes.bfloat16)]
    program = nki.trace(k, ins)
    rng = np.random.default_rng(11)
    refs = []
    for space in rng.choice(["sbuf", "psum", "hbm"], 100):
        tensor = _random_tensor(rng, space)
        refs += [_random_ref(rng, tensor) for _ in range(3)]  # two writes, then a read
    whole = Ref("psum", "across", 2048 - 64, (128, 32), "float32", ((32, 128), (1, 32)))
    refs += [whole, whole, whole]  # rows across two PSUM banks
    assert sum(golden._layout(r) is not None for r in refs) > 200
    fast = _session(program, ins, refs, 5)
    monkeypatch.setattr(golden, "_layout", lambda ref: None)
    slow = _session(program, ins, refs, 5)
    assert fast[0] == slow[0]
    assert all(np.array_equal(a, b) for a, b in zip(fast[1], slow[1]))
    assert sum(1 for r in fast[0] if isinstance(r, bytes)) > 30
    assert sum(1 for r in fast[0] if r == "w") > 120


def test_program_order_runs_the_earliest_runnable_instruction(monkeypatch):
    """In program order the golden run executes every instruction in program position order
    (each waits only on earlier ones), whichever streams they are in."""
    e, k = load("matmul_tiled")
    ins = e.inputs(np.random.default_rng(0))
    program = nki.trace(k, ins)
    seen = []
    run = golden.execute
    monkeypatch.setattr(golden, "execute", lambda st, i: (seen.append(i.seq), run(st, i)))
    golden.run(program, ins)
    assert seen == sorted(seen) and len(seen) == sum(len(s) for s in program.streams.values())
