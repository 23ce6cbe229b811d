"""The PSUM golden model (ncrtl.model.psum) against the contract (docs/psum.md).

The slot update is proven against the exact rational reference (tests/exact_ref.py); the state
model against a naive per-element loop over that reference, with its own XORWOW streams and its
own statement of the rules; the arbiter against hand-worked examples and its fairness claims.
"""

import copy
import re

import ml_dtypes
import numpy as np
import pytest

from ncrtl.model.fp import Xorwow
from ncrtl.model.psum import (
    FIELDS,
    INSTR_BITS,
    MAX_WRITE_N,
    PORTS,
    Arbiter,
    Dtype,
    Error,
    Flag,
    Geometry,
    GroupState,
    Psum,
    Rounding,
    Write,
    check,
    decode,
    encode,
    rand_states,
    read_add_write,
)
from tests.exact_ref import (
    MarsagliaStream,
    psum_slot_reference,
    round_stochastic_rational,
    splitmix64_state,
    value_of_bits,
)

FP32, BF16, RAW16 = Dtype.FP32, Dtype.BF16, Dtype.RAW16
RNE, SR = Rounding.RNE, Rounding.SR
QNAN32, QNAN16 = 0x7FC00000, 0x7FC0

#: FP32 encodings worth meeting often: zeros, Inf, NaNs with payloads (quiet and signalling),
#: subnormals, the normal/subnormal edge, the largest finite values, BF16 ties and overflow edges.
SPECIALS = [
    0x00000000,
    0x80000000,
    0x7F800000,
    0xFF800000,
    0x7FC00000,
    0x7F800001,
    0xFFC12345,
    0x7FA00000,
    0x00000001,
    0x80000001,
    0x007FFFFF,
    0x00800000,
    0x00018000,
    0x7F7FFFFF,
    0xFF7FFFFF,
    0x7F7F8000,
    0x7F7F7FFF,
    0x3F808000,
    0x3F818000,
    0xBF808000,
    0x3F800001,
]


def _fp32_bits(rng, n, exp=(118, 138), special=0.05, wild=0.1):
    """Random FP32 encodings: mostly of similar magnitude (so sums round and cancel), some
    anywhere, some with BF16-tie low halves, some from :data:`SPECIALS`."""
    sign = rng.integers(0, 2, n, dtype=np.uint64) << np.uint64(31)
    e = rng.integers(*exp, n).astype(np.uint64) << np.uint64(23)
    m = rng.integers(0, 1 << 23, n, dtype=np.uint64)
    bits = sign | e | m
    pick = rng.random(n)
    bits = np.where(pick < wild, rng.integers(0, 1 << 32, n, dtype=np.uint64), bits)
    bits = np.where(
        (pick >= 0.1) & (pick < 0.2), (bits & np.uint64(0xFFFF0000)) | np.uint64(0x8000), bits
    )
    sp = np.array(SPECIALS, dtype=np.uint64)[rng.integers(0, len(SPECIALS), n)]
    bits = np.where(pick >= 1 - special, sp, bits)
    return bits.astype(np.uint32)


def _bf16_bits(rng, n):
    return (_fp32_bits(rng, n) >> np.uint32(16)).astype(np.uint16)


def _snapshot(ps):
    """Everything a rejected instruction must leave alone."""
    return (
        ps.mem.copy(),
        copy.deepcopy(ps.groups),
        [ps.rand_state(p) for p in range(ps.geometry.partitions)],
        ps.pending,
    )


def _assert_unchanged(ps, snap):
    mem, groups, states, pending = snap
    assert np.array_equal(ps.mem, mem)
    assert ps.groups == groups
    assert [ps.rand_state(p) for p in range(ps.geometry.partitions)] == states
    assert ps.pending == pending


# -- read_add_write against the rational reference -----------------------------------------------


def _check_slots(old, value, dtype, overwrite, rounding=RNE, rand=None):
    got = read_add_write(old, value, dtype=dtype, overwrite=overwrite, rounding=rounding, rand=rand)
    assert got.dtype == (np.uint32 if dtype == FP32 else np.uint16)
    assert got.shape == np.shape(value)
    mode = "sr" if rounding == SR else "rne"
    for i in range(len(value)):
        o = None if old is None else int(old[i])
        r = None if rand is None else int(rand[i])
        want = psum_slot_reference(o, int(value[i]), dtype.name.lower(), overwrite, mode, r)
        assert int(got[i]) == want, (
            f"case {i}: {dtype.name} overwrite={overwrite} {mode} old={o!r:} "
            f"value={int(value[i]):#010x} r={r}: got {int(got[i]):#x} want {want:#x}"
        )
    return got


def test_read_add_write_fp32_random_vs_rational():
    rng = np.random.default_rng(1)
    old, val = _fp32_bits(rng, 4000), _fp32_bits(rng, 4000)
    _check_slots(old, val, FP32, False)
    # Overwrite stores the bits as they are, NaN payloads included.
    assert np.array_equal(_check_slots(old, val, FP32, True), val)


@pytest.mark.parametrize("rounding", [RNE, SR])
@pytest.mark.parametrize("overwrite", [False, True])
def test_read_add_write_bf16_random_vs_rational(rounding, overwrite):
    rng = np.random.default_rng(2 + 2 * int(rounding) + int(overwrite))
    n = 3000
    old, val = _bf16_bits(rng, n), _fp32_bits(rng, n)
    # Rounding values: uniform, plus the extremes and the two sides of one half.
    rand = rng.integers(0, 1 << 16, n)
    rand[rng.random(n) < 0.1] = 0
    rand[rng.random(n) < 0.1] = 0xFFFF
    rand[rng.random(n) < 0.05] = 0x7FFF
    rand[rng.random(n) < 0.05] = 0x8000
    _check_slots(
        None if overwrite else old, val, BF16, overwrite, rounding, rand if rounding == SR else None
    )


def test_read_add_write_raw16():
    rng = np.random.default_rng(4)
    val = _fp32_bits(rng, 1000)
    got = _check_slots(None, val, RAW16, True)
    assert np.array_equal(got, (val & 0xFFFF).astype(np.uint16))


def _f32(x):
    return int(np.float32(x).view(np.uint32))


def _bf(x):
    return int(np.array(x, dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.uint16))


# (old, value, dtype, overwrite, rounding, r, expected); every row is also checked against the
# rational reference, so the expected value documents the case and proves the reference too.
CORNERS = [
    # FP32 NaN: payloads in, canonical NaN out; overwrite keeps the beat's payload.
    (0x7FA12345, _f32(1), FP32, False, RNE, None, QNAN32),
    (_f32(1), 0x7F800001, FP32, False, RNE, None, QNAN32),
    (0xFFC00001, 0xFFC00002, FP32, False, RNE, None, QNAN32),
    (0, 0x7FA12345, FP32, True, RNE, None, 0x7FA12345),
    (0, 0xFF800001, FP32, True, RNE, None, 0xFF800001),
    # Inf.
    (0x7F800000, 0xFF800000, FP32, False, RNE, None, QNAN32),
    (0x7F800000, _f32(-3e38), FP32, False, RNE, None, 0x7F800000),
    (0xFF800000, 0xFF800000, FP32, False, RNE, None, 0xFF800000),
    (0x7F7FFFFF, 0x7F7FFFFF, FP32, False, RNE, None, 0x7F800000),  # overflow
    (0xFF7FFFFF, 0xF3000000, FP32, False, RNE, None, 0xFF800000),  # tie at the edge: Inf
    # Exact cancellation and signed zero: +0 unless both are -0.
    (_f32(3), _f32(-3), FP32, False, RNE, None, 0x00000000),
    (_f32(-3), _f32(3), FP32, False, RNE, None, 0x00000000),
    (0x80000000, 0x80000000, FP32, False, RNE, None, 0x80000000),
    (0x80000000, 0x00000000, FP32, False, RNE, None, 0x00000000),
    (0x00000000, 0x80000000, FP32, False, RNE, None, 0x00000000),
    (0x80000001, 0x00000001, FP32, False, RNE, None, 0x00000000),
    # Subnormals are kept.
    (0x00000001, 0x00000001, FP32, False, RNE, None, 0x00000002),
    (0x00800000, 0x80000001, FP32, False, RNE, None, 0x007FFFFF),
    (0x007FFFFF, 0x00000001, FP32, False, RNE, None, 0x00800000),
    # FP32 RNE tie: 1 + 2**-24 stays 1, (1 + 2**-23) + 2**-24 goes to even.
    (_f32(1), 0x33800000, FP32, False, RNE, None, 0x3F800000),
    (0x3F800001, 0x33800000, FP32, False, RNE, None, 0x3F800002),
    # BF16 NaN: canonical out of overwrite and accumulate, whatever the payload or rounding.
    (0, 0x7FA12345, BF16, True, RNE, None, QNAN16),
    (0, 0xFFC00001, BF16, True, SR, 0xFFFF, QNAN16),
    (0x7FC1, _f32(1), BF16, False, RNE, None, QNAN16),
    (0x7F80, 0xFF800000, BF16, False, SR, 0x1234, QNAN16),  # Inf - Inf
    # BF16 Inf passes, also under SR with the largest r.
    (0, 0xFF800000, BF16, True, SR, 0xFFFF, 0xFF80),
    (0x7F80, _f32(1), BF16, False, RNE, None, 0x7F80),
    # BF16 ties under RNE (to even) and the SR threshold at the same point.
    (0, 0x3F808000, BF16, True, RNE, None, 0x3F80),
    (0, 0x3F818000, BF16, True, RNE, None, 0x3F82),
    (0, 0xBF818000, BF16, True, RNE, None, 0xBF82),
    (0, 0x3F808000, BF16, True, SR, 0x7FFF, 0x3F80),
    (0, 0x3F808000, BF16, True, SR, 0x8000, 0x3F81),
    (0, 0x3F80FFFF, BF16, True, SR, 0x0000, 0x3F80),  # r = 0 truncates
    (0, 0x3F800001, BF16, True, SR, 0xFFFF, 0x3F81),  # r = max rounds any bit up
    (0, 0x3F800000, BF16, True, SR, 0xFFFF, 0x3F80),  # exact stays exact
    (0x3F80, 0x3B000000, BF16, False, RNE, None, 0x3F80),  # 1 + 2**-9 (a quarter ulp)
    (0x3F80, 0x3B000000, BF16, False, SR, 0xBFFF, 0x3F80),
    (0x3F80, 0x3B000000, BF16, False, SR, 0xC000, 0x3F81),
    # BF16 overflow to Inf: RNE at the tie above the largest finite, SR carrying past it, and an
    # accumulate whose FP32 sum already overflows.
    (0, 0x7F7F8000, BF16, True, RNE, None, 0x7F80),
    (0, 0x7F7F7FFF, BF16, True, RNE, None, 0x7F7F),
    (0, 0xFF7FFFFF, BF16, True, RNE, None, 0xFF80),
    (0, 0x7F7F0001, BF16, True, SR, 0xFFFF, 0x7F80),
    (0, 0x7F7F0001, BF16, True, SR, 0xFFFE, 0x7F7F),
    (0, 0xFF7FFFFF, BF16, True, SR, 0x0001, 0xFF80),
    (0x7F7F, 0x7B800000, BF16, False, RNE, None, 0x7F80),  # max + 2**120 = 2**128
    (0x7F7F, 0x7B000000, BF16, False, SR, 0x0000, 0x7F7F),  # max + 2**119: FP32-exact
    (0x7F7F, 0x7B000000, BF16, False, SR, 0x8000, 0x7F80),
    (0x7F7F, 0x7B000000, BF16, False, RNE, None, 0x7F80),  # ... a tie to even: Inf
    # BF16 signed zero and cancellation.
    (0x8000, 0x80000000, BF16, False, RNE, None, 0x8000),
    (0x8000, 0x80000000, BF16, False, SR, 0xFFFF, 0x8000),
    (0x8000, 0x00000000, BF16, False, SR, 0xFFFF, 0x0000),
    (0x3F80, _f32(-1), BF16, False, SR, 0xFFFF, 0x0000),
    (_bf(-2.5), _f32(2.5), BF16, False, RNE, None, 0x0000),
    (0, 0x80000001, BF16, True, RNE, None, 0x8000),  # underflow keeps the sign
    (0, 0x80000001, BF16, True, SR, 0xFFFF, 0x8001),
    # BF16 subnormals.
    (0x0001, 0x00000001, BF16, False, RNE, None, 0x0001),
    (0x0001, 0x00000001, BF16, False, SR, 0xFFFF, 0x0002),
    (0x0001, 0x00008000, BF16, False, RNE, None, 0x0002),  # 1.5 subnormal ulps: tie
    (0x007F, 0x00010000, BF16, False, RNE, None, 0x0080),  # into the normal range
    (0x8001, 0x00000000, BF16, False, RNE, None, 0x8001),
    # BF16 accumulate: upcast, FP32 RNE add, then round (double rounding is the contract).
    (0x3F80, 0x33800000, BF16, False, SR, 0xFFFF, 0x3F80),  # 1 + 2**-24 -> FP32 1.0
    (0x3F80, 0x34000000, BF16, False, SR, 0xFFFF, 0x3F81),  # 1 + 2**-23 survives
    # RAW16 keeps the low half bit for bit.
    (0, 0x7FC1FFFF, RAW16, True, RNE, None, 0xFFFF),
    (0, 0x12345678, RAW16, True, RNE, None, 0x5678),
]


@pytest.mark.parametrize(
    "old,value,dtype,overwrite,rounding,r,want", CORNERS, ids=[f"{i}" for i in range(len(CORNERS))]
)
def test_read_add_write_corners(old, value, dtype, overwrite, rounding, r, want):
    o = np.array([old], dtype=np.uint32 if dtype == FP32 else np.uint16)
    got = _check_slots(
        o,
        np.array([value], dtype=np.uint32),
        dtype,
        overwrite,
        rounding,
        None if r is None else np.array([r]),
    )
    assert int(got[0]) == want


def test_read_add_write_accepts_float_views_and_scalars():
    got = read_add_write(np.float32(1.5), np.float32(2.25), dtype=FP32, overwrite=False)
    assert got.shape == () and got.view(np.float32) == np.float32(3.75)
    old = np.array([1.0], dtype=ml_dtypes.bfloat16)
    got = read_add_write(old, np.float32([0.5]), dtype=BF16, overwrite=False)
    assert got.view(ml_dtypes.bfloat16)[0] == 1.5
    # On overwrite, old is not looked at.
    got = read_add_write(
        None, np.float32([0.5, -0.0]), dtype=BF16, overwrite=True, rounding=SR, rand=[0, 0xFFFF]
    )
    assert got.tolist() == [0x3F00, 0x8000]


def test_reference_stochastic_rounding_matches_the_bit_formula():
    """The rational SR reference and docs/numerics.md's ``((mag + r) >> 16) | sign`` agree."""
    rng = np.random.default_rng(5)
    bits = _fp32_bits(rng, 3000)
    rand = rng.integers(0, 1 << 16, 3000)
    for b, r in zip(bits.tolist(), rand.tolist()):
        v = value_of_bits(b, 8, 23, 127)
        if isinstance(v, str):
            continue
        want = (((b & 0x7FFFFFFF) + r) >> 16) | ((b >> 16) & 0x8000)
        assert round_stochastic_rational(v, r, negzero=b == 0x80000000) == want


def test_read_add_write_bad_input():
    u32 = np.zeros(3, dtype=np.uint32)
    u16 = np.zeros(3, dtype=np.uint16)
    with pytest.raises(ValueError, match="raw16 accumulate is illegal"):
        read_add_write(u16, u32, dtype=RAW16, overwrite=False)
    with pytest.raises(ValueError, match="stochastic rounding needs a bf16 destination, not fp32"):
        read_add_write(u32, u32, dtype=FP32, overwrite=False, rounding=SR, rand=[0, 0, 0])
    with pytest.raises(ValueError, match="stochastic rounding needs a bf16 destination, not raw16"):
        read_add_write(None, u32, dtype=RAW16, overwrite=True, rounding=SR, rand=[0, 0, 0])
    with pytest.raises(ValueError, match="stochastic rounding needs rand"):
        read_add_write(u16, u32, dtype=BF16, overwrite=False, rounding=SR)
    with pytest.raises(ValueError, match=r"rand shape \(2,\) must equal value shape \(3,\)"):
        read_add_write(u16, u32, dtype=BF16, overwrite=False, rounding=SR, rand=[0, 0])
    with pytest.raises(ValueError, match=r"rand must hold integers in \[0, 65535\]"):
        read_add_write(u16, u32, dtype=BF16, overwrite=False, rounding=SR, rand=[0, 0, 65536])
    with pytest.raises(ValueError, match=r"rand must hold integers in \[0, 65535\]"):
        read_add_write(u16, u32, dtype=BF16, overwrite=False, rounding=SR, rand=[0.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="value must be uint32 bits .* not dtype float64"):
        read_add_write(u32, np.zeros(3), dtype=FP32, overwrite=False)
    with pytest.raises(ValueError, match="old must be uint16 bits .* not dtype uint32"):
        read_add_write(u32, u32, dtype=BF16, overwrite=False)
    with pytest.raises(ValueError, match="old must be uint32 bits .* not dtype uint16"):
        read_add_write(u16, u32, dtype=FP32, overwrite=False)
    with pytest.raises(ValueError, match=r"old shape \(2,\) must equal value shape \(3,\)"):
        read_add_write(u32[:2], u32, dtype=FP32, overwrite=False)
    with pytest.raises(ValueError, match="dtype 3 is not a PSUM element type"):
        read_add_write(u32, u32, dtype=3, overwrite=True)
    with pytest.raises(ValueError, match="rounding 2 is neither 0 .rne. nor 1 .sr."):
        read_add_write(u32, u32, dtype=FP32, overwrite=True, rounding=2)
    with pytest.raises(ValueError, match="overwrite must be a bool, not 'yes'"):
        read_add_write(u32, u32, dtype=FP32, overwrite="yes")


# -- the state model against a naive per-element reference ---------------------------------------


def _naive_rule(w, geo, groups):
    """The rule ``w`` breaks (an int code, 0 = legal), stated again from docs/psum.md."""
    if not 0 <= w.bank < geo.banks:
        return 1
    if w.dtype not in (0, 1, 2):
        return 2
    if w.n < 1:
        return 3
    if w.col < 0 or w.col + w.n > geo.rows * (1 if w.dtype == 0 else 2):
        return 4
    if w.flags & 1 and w.flags & 4:
        return 5
    if w.rounding == 1 and w.dtype != 1:
        return 6
    if w.dtype == 2 and not w.flags & 1:
        return 7
    if not w.flags & 5:
        is_open, dt = groups[w.bank]
        if not is_open:
            return 8
        if dt != w.dtype:
            return 9
    return 0


class NaivePsum:
    """PSUM one element at a time: Python ints, the rational slot reference, Marsaglia streams."""

    def __init__(self, geo, seed=0):
        self.geo = geo
        self.mem = [[[0] * geo.partitions for _ in range(geo.rows)] for _ in range(geo.banks)]
        self.groups = [(False, 0)] * geo.banks
        self.gens = [MarsagliaStream(splitmix64_state(seed + p)) for p in range(geo.partitions)]

    def write(self, w, beats):
        """(error code, completed bank or None)."""
        code = _naive_rule(w, self.geo, self.groups)
        if code:
            return code, None
        if w.flags & 5:
            self.groups[w.bank] = (True, int(w.dtype))
        if w.flags & 2:
            self.groups[w.bank] = (False, self.groups[w.bank][1])
        name = ("fp32", "bf16", "raw16")[w.dtype]
        mode = ("rne", "sr")[w.rounding]
        for j, beat in enumerate(beats):
            c = w.col + j
            for p in range(self.geo.partitions):
                r = self.gens[p].next_u32() >> 16 if w.rounding == 1 else None
                v = int(beat[p])
                if w.dtype == 0:
                    self.mem[w.bank][c][p] = psum_slot_reference(
                        self.mem[w.bank][c][p], v, name, bool(w.flags & 1), mode, r
                    )
                else:
                    row, sh = c // 2, 16 * (c % 2)
                    word = self.mem[w.bank][row][p]
                    new = psum_slot_reference(
                        (word >> sh) & 0xFFFF, v, name, bool(w.flags & 1), mode, r
                    )
                    self.mem[w.bank][row][p] = (word & ~(0xFFFF << sh)) | (new << sh)
        return 0, (w.bank if w.flags & 2 else None)

    def engine_write(self, bank, row, data, mask):
        keep = (0 if mask & 1 else 0xFFFF) | (0 if mask & 2 else 0xFFFF0000)
        for p in range(self.geo.partitions):
            self.mem[bank][row][p] = (self.mem[bank][row][p] & keep) | (int(data[p]) & ~keep)


def _group_flags(rng, length):
    """A legal ``psum_accumulate_flag`` sequence for a group of ``length`` writes."""
    first = int(rng.choice([Flag.FIRST, Flag.FIRST_ACCUMULATE]))
    if length == 1:
        return [first | Flag.LAST]
    return [first] + [0] * (length - 2) + [int(Flag.LAST)]


def _random_stream(rng, geo, n_groups):
    """Interleaved groups of 1..8 writes over the banks, with engine writes and rule breakers.

    Yields ("write", Write) or ("engine", (bank, row, mask)).
    """
    queues = [[] for _ in range(geo.banks)]  # per bank: the rest of its current group
    started = 0
    while started < n_groups or any(queues):
        u = rng.random()
        if u < 0.08:
            yield (
                "engine",
                (int(rng.integers(geo.banks)), int(rng.integers(geo.rows)), int(rng.integers(4))),
            )
            continue
        if u < 0.16:
            # Anything at all: mostly illegal (and drained), sometimes legal by chance.
            yield (
                "write",
                Write(
                    int(rng.integers(-1, geo.banks + 2)),
                    int(rng.integers(-1, 2 * geo.rows)),
                    int(rng.integers(0, 6)),
                    int(rng.integers(0, 4)),
                    int(rng.integers(0, 2)),
                    int(rng.integers(0, 8)),
                ),
            )
            continue
        bank = int(rng.integers(geo.banks))
        if not queues[bank]:
            if started >= n_groups:
                continue
            started += 1
            kind = rng.choice(["fp32", "bf16", "raw16"], p=[0.45, 0.45, 0.1])
            if kind == "raw16":
                queues[bank] = [(RAW16, RNE, int(rng.choice([1, 3])))]
            else:
                dt = FP32 if kind == "fp32" else BF16
                for f in _group_flags(rng, int(rng.integers(1, 9))):
                    rnd = Rounding(int(rng.integers(2))) if dt == BF16 else RNE
                    queues[bank].append((dt, rnd, f))
        dt, rnd, f = queues[bank].pop(0)
        cap = geo.capacity(dt)
        # Small column windows so groups keep hitting the same slots.
        col = int(rng.integers(0, min(cap, 6)))
        n = int(rng.integers(1, min(cap - col, 5) + 1))
        yield "write", Write(bank, col, n, dt, rnd, f)


@pytest.mark.parametrize("seed,use_issue", [(0, False), (7, True)])
def test_psum_random_groups_vs_naive(seed, use_issue):
    geo = Geometry(partitions=4, banks=3, bank_bytes=32)
    rng = np.random.default_rng(100 + seed)
    ps, ref = Psum(geo, seed=seed), NaivePsum(geo, seed=seed)
    completes = errors = legal = 0
    for kind, item in _random_stream(rng, geo, 160):
        if kind == "engine":
            bank, row, mask = item
            data = _fp32_bits(rng, geo.partitions)
            ps.engine_write(bank, row, data, mask)
            ref.engine_write(bank, row, data, mask)
            continue
        w = item
        beats = _fp32_bits(rng, max(w.n, 0) * geo.partitions).reshape(max(w.n, 0), geo.partitions)
        code, done = ref.write(w, beats)
        if use_issue:
            err = ps.issue(w)
            assert (0 if err is None else int(err[0])) == code, w
            assert ps.pending == max(w.n, 0)
            got = [ps.beat(b) for b in beats]
            assert got[:-1] == [None] * (len(got) - 1)
            got_done = got[-1] if got else None
        elif code:
            snap = _snapshot(ps)
            with pytest.raises(ValueError) as exc:
                ps.write(w, beats)
            assert (
                str(exc.value)
                == check(w, geo, ps.groups[w.bank] if 0 <= w.bank < geo.banks else None)[1]
            )
            _assert_unchanged(ps, snap)
            got_done = None
        else:
            got_done = ps.write(w, beats)
        assert got_done == done, w
        errors += code != 0
        legal += code == 0
        completes += done is not None
        assert [(g.open, int(g.dtype)) for g in ps.groups] == ref.groups
        assert np.array_equal(ps.mem, np.array(ref.mem, dtype=np.uint32)), w
    for p in range(geo.partitions):
        assert ps.rand_state(p) == ref.gens[p].state
    # The stream exercised what it is meant to.
    assert legal > 400 and errors > 40 and completes > 120


def test_sr_draws_follow_independent_xorwow():
    """One draw per partition per SR beat, from the partition's own generator; nothing else draws."""
    geo = Geometry(partitions=8, banks=2, bank_bytes=64)
    seed = 0xFEEDFACE
    ps = Psum(geo, seed=seed)
    gens = [MarsagliaStream(splitmix64_state(seed + p)) for p in range(8)]
    assert [ps.rand_state(p) for p in range(8)] == [g.state for g in gens]
    rng = np.random.default_rng(11)

    def sr_write(w):
        # Values with all 16 low bits random: the result reveals whether r pushed them up.
        beats = _fp32_bits(rng, w.n * 8, special=0).reshape(w.n, 8)
        ps.write(w, beats)
        for j in range(w.n):
            for p in range(8):
                r = gens[p].next_u32() >> 16
                c = w.col + j
                got = (int(ps.mem[w.bank, c // 2, p]) >> (16 * (c % 2))) & 0xFFFF
                assert got == psum_slot_reference(None, int(beats[j, p]), "bf16", True, "sr", r)

    sr_write(Write(0, 0, 5, BF16, SR, 3))
    # Nothing of this draws: RNE BF16, FP32, RAW16, engine ports, views, rejected writes (also
    # rejected SR writes, whose beats are drained).
    ps.write(Write(0, 6, 3, BF16, RNE, 3), np.ones((3, 8), np.float32))
    ps.write(Write(1, 0, 2, FP32, RNE, 3), np.ones((2, 8), np.float32))
    ps.write(Write(1, 8, 2, RAW16, RNE, 1), np.ones((2, 8), np.float32))
    ps.engine_write(0, 3, np.arange(8, dtype=np.uint32), mask=1)
    ps.engine_read(0, 3)
    ps.read(0, 0, 4, BF16)
    assert ps.issue(Write(0, 0, 4, BF16, SR, 0))[0] == Error.NO_GROUP  # bank 0's group is closed
    assert ps.pending == 4
    for _ in range(4):
        ps.beat(np.ones(8, np.float32))
    with pytest.raises(ValueError, match="no open accumulation group"):
        ps.write(Write(0, 0, 4, BF16, SR, 2), np.ones((4, 8), np.float32))
    assert [ps.rand_state(p) for p in range(8)] == [g.state for g in gens]
    # The next SR beats (overwrite and accumulate) continue the same streams.
    sr_write(Write(0, 10, 7, BF16, SR, 1))
    acc = _fp32_bits(rng, 8, special=0).reshape(1, 8)
    old = [(int(ps.mem[0, 5, p]) >> 16) & 0xFFFF for p in range(8)]  # column 11
    ps.write(Write(0, 11, 1, BF16, SR, 2), acc)
    for p in range(8):
        r = gens[p].next_u32() >> 16
        want = psum_slot_reference(old[p], int(acc[0, p]), "bf16", False, "sr", r)
        assert (int(ps.mem[0, 5, p]) >> 16) == want
    assert [ps.rand_state(p) for p in range(8)] == [g.state for g in gens]


def test_set_rand_state_is_what_the_next_draw_uses():
    ps = Psum(Geometry(partitions=2, banks=1, bank_bytes=16))
    words = (1, 2, 3, 4, 5, 0xFFFFFFFF)
    ps.set_rand_state(1, words)
    assert ps.rand_state(1) == words
    assert ps.rand_state(0) == splitmix64_state(0)
    ps.write(Write(0, 0, 1, BF16, SR, 3), np.array([[0x3F80FFFF, 0x3F800001]], np.uint32))
    g0, g1 = MarsagliaStream(splitmix64_state(0)), MarsagliaStream(words)
    r0, r1 = g0.next_u32() >> 16, g1.next_u32() >> 16
    assert ps.mem[0, 0].tolist() == [
        0x3F80 + (0xFFFF + r0 >= 1 << 16),
        0x3F80 + (1 + r1 >= 1 << 16),
    ]
    assert ps.rand_state(1) == g1.state and ps.rand_state(0) == g0.state


def test_reset_state_and_rand_states():
    ps = Psum()
    g = ps.geometry
    assert (g.partitions, g.banks, g.bank_bytes, g.rows) == (128, 8, 2048, 512)
    assert ps.mem.shape == (8, 512, 128) and ps.mem.dtype == np.uint32 and not ps.mem.any()
    assert ps.groups == [GroupState()] * 8 and ps.pending == 0
    for p in (0, 1, 127):
        assert ps.rand_state(p) == splitmix64_state(p)
    st = rand_states(2**64 - 3, 3)
    assert st.shape == (3, 6) and st.dtype == np.uint32
    assert [tuple(map(int, row)) for row in st] == [
        splitmix64_state(2**64 - 3 + p) for p in range(3)
    ]
    ps = Psum(Geometry(partitions=3), seed=2**64 - 3)
    assert [ps.rand_state(p) for p in range(3)] == [tuple(map(int, row)) for row in st]


def test_group_complete_and_group_state():
    geo = Geometry(partitions=2, banks=4, bank_bytes=16)
    ps = Psum(geo)
    one = np.ones((1, 2), np.float32)
    assert ps.write(Write(2, 0, 1, FP32, RNE, 1), one) is None
    assert ps.groups[2] == GroupState(True, FP32)
    assert ps.write(Write(2, 0, 1, FP32, RNE, 0), one) is None
    assert ps.write(Write(2, 0, 1, FP32, RNE, 2), one) == 2
    assert ps.groups[2] == GroupState(False, FP32)
    assert ps.read(2, 0, 1, FP32).tolist() == [[3.0], [3.0]]
    assert ps.write(Write(3, 0, 1, BF16, RNE, 3), one) == 3  # NKI default: a one-write group
    assert ps.write(Write(2, 0, 1, FP32, RNE, 6), one) == 2  # accumulate-first + last
    assert ps.read(2, 0, 1, FP32).tolist() == [[4.0], [4.0]]
    # A group opened in one dtype is restarted by a first write of another.
    ps.write(Write(1, 0, 1, FP32, RNE, 1), one)
    ps.write(Write(1, 0, 2, BF16, SR, 4), np.ones((2, 2), np.float32))
    assert ps.groups[1] == GroupState(True, BF16)
    # Streamed: only the last beat of a legal write with bit1 completes.
    assert ps.issue(Write(1, 2, 3, BF16, RNE, 2)) is None
    assert ps.groups[1] == GroupState(False, BF16)  # updated at issue
    assert [ps.beat(np.ones(2, np.float32)) for _ in range(3)] == [None, None, 1]
    assert ps.issue(Write(1, 2, 2, BF16, RNE, 2)) == (
        Error.NO_GROUP,
        check(Write(1, 2, 2, BF16, RNE, 2), geo, GroupState())[1],
    )
    assert [ps.beat(np.ones(2, np.float32)) for _ in range(2)] == [None, None]
    assert ps.issue(Write(0, 0, 2, FP32, RNE, 3)) is None
    assert ps.beat(np.ones(2, np.float32)) is None and ps.pending == 1
    assert ps.beat(np.ones(2, np.float32)) == 0 and ps.pending == 0


def _half(word, c):
    """16-bit element ``c`` of a slot's word: half ``c % 2``, half 0 the low bits."""
    return (int(word) >> (16 * (c % 2))) & 0xFFFF


def test_sixteen_bit_addressing_and_views():
    geo = Geometry(partitions=3, banks=2, bank_bytes=16)  # 4 words: 4 FP32 or 8 16-bit slots
    ps = Psum(geo)
    base = [[0xA0B0C0D0 + 0x01010101 * (3 * row + p) for p in range(3)] for row in range(4)]
    for row in range(4):
        ps.engine_write(1, row, np.array(base[row], np.uint32))
    raw = np.array([[0xABCD0000 + 16 * j + p for p in range(3)] for j in range(5)], np.uint32)
    ps.write(Write(1, 3, 5, RAW16, RNE, 3), raw)  # elements 3..7: words 1..3
    for c in range(8):
        for p in range(3):
            want = (int(raw[c - 3, p]) & 0xFFFF) if c >= 3 else _half(base[c // 2][p], c)
            assert _half(ps.mem[1, c // 2, p], c) == want, (c, p)
    # read(): the same halves, as [partitions, n].
    r16 = ps.read(1, 0, 8, RAW16)
    assert r16.dtype == np.uint16 and r16.shape == (3, 8)
    assert r16.tolist() == [[_half(ps.mem[1, c // 2, p], c) for c in range(8)] for p in range(3)]
    bf = ps.read(1, 1, 2, BF16)
    assert bf.dtype == ml_dtypes.bfloat16 and bf.view(np.uint16).tolist() == r16[:, 1:3].tolist()
    f32 = ps.read(1, 1, 3, FP32)
    assert f32.dtype == np.float32 and f32.view(np.uint32).tolist() == ps.mem[1, 1:4].T.tolist()
    assert ps.read(0, 2, 0, FP32).shape == (3, 0)
    # A BF16 write to an odd column leaves its neighbour (the even half) alone, and back.
    ps.write(Write(0, 5, 1, BF16, RNE, 3), np.float32([[1.5, -2.0, 0.25]]))
    assert ps.mem[0, 2].tolist() == [0x3FC00000, 0xC0000000, 0x3E800000]
    ps.write(Write(0, 4, 1, BF16, RNE, 1), np.float32([[1.0, 1.0, 1.0]]))
    ps.write(Write(0, 4, 1, BF16, RNE, 2), np.float32([[1.0, 1.0, 1.0]]))
    assert ps.mem[0, 2].tolist() == [0x3FC04000, 0xC0004000, 0x3E804000]
    assert ps.read(0, 4, 2, BF16).astype(np.float32).tolist() == [[2, 1.5], [2, -2], [2, 0.25]]


def test_engine_ports_are_plain_sram():
    geo = Geometry(partitions=4, banks=2, bank_bytes=16)
    ps = Psum(geo, seed=3)
    ps.write(Write(1, 0, 1, BF16, SR, 1), np.ones((1, 4), np.float32))  # group open in bank 1
    snap = _snapshot(ps)
    d = np.array([0x11112222, 0x33334444, 0x55556666, 0x77778888], np.uint32)
    ps.engine_write(1, 0, d, mask=2)  # upper halves only
    assert ps.mem[1, 0].tolist() == [0x11113F80, 0x33333F80, 0x55553F80, 0x77773F80]
    ps.engine_write(1, 0, d, mask=1)
    assert ps.mem[1, 0].tolist() == d.tolist()
    ps.engine_write(1, 1, d.view(np.float32))  # default mask 3, float32 view
    ps.engine_write(1, 2, ~d, mask=0)  # writes nothing
    assert ps.engine_read(1, 1).tolist() == d.tolist() and not ps.engine_read(1, 2).any()
    got = ps.engine_read(1, 1)
    got[:] = 0  # a copy
    assert ps.mem[1, 1].tolist() == d.tolist()
    # No groups, no draws.
    assert ps.groups == snap[1]
    assert [ps.rand_state(p) for p in range(4)] == snap[2]


# -- rules: every error, through write and through issue ------------------------------------------


def _rule_cases(geo):
    """(Write, Error, words the message must contain), for a PSUM whose bank 1 has an open BF16
    group and whose other banks have none."""
    return [
        (Write(geo.banks, 0, 1), Error.BANK, f"bank {geo.banks} is out of range"),
        (Write(-1, 0, 1), Error.BANK, "bank -1 is out of range"),
        (Write(0, 0, 2, dtype=3), Error.DTYPE, "dtype 3 is reserved"),
        (Write(0, 0, 0), Error.COUNT, "n=0: a write needs at least one output vector"),
        (Write(0, 0, -2), Error.COUNT, "n=-2"),
        (Write(0, 0, MAX_WRITE_N + 1), Error.COUNT, "n=2048 does not fit the instruction's 11-bit"),
        (Write(0, geo.rows - 1, 2), Error.RANGE, f"columns {geo.rows - 1}..{geo.rows} do not fit"),
        (Write(0, 2 * geo.rows - 2, 3, BF16), Error.RANGE, f"bank row of {2 * geo.rows} bf16"),
        (Write(0, -1, 2), Error.RANGE, "columns -1..0 do not fit"),
        (Write(0, 0, 2, flags=5), Error.FLAGS, "bit0 .* and bit2 .* are exclusive"),
        (
            Write(0, 0, 2, FP32, SR, 3),
            Error.ROUNDING,
            "stochastic rounding needs a bf16 destination",
        ),
        (Write(0, 0, 2, RAW16, SR, 3), Error.ROUNDING, "not raw16"),
        (Write(0, 0, 2, RAW16, RNE, 2), Error.RAW_ACCUMULATE, "raw16 .* can only overwrite"),
        (Write(0, 0, 2, RAW16, RNE, 4), Error.RAW_ACCUMULATE, "lacks bit0"),
        (
            Write(0, 0, 2, FP32, RNE, 0),
            Error.NO_GROUP,
            "bank 0, which has no open accumulation group",
        ),
        (Write(2, 0, 2, BF16, SR, 2), Error.NO_GROUP, "no open accumulation group"),
        (
            Write(1, 0, 2, FP32, RNE, 2),
            Error.GROUP_DTYPE,
            "group open in bank 1 is bf16.*fp32 cannot join",
        ),
        # Rule order: the first broken rule is the one reported.
        (Write(9, 0, 0, 3, 1, 5), Error.BANK, "bank 9"),
        (Write(0, 5000, 0, 3, 1, 5), Error.DTYPE, "reserved"),
        (Write(0, 5000, 0, RAW16, 1, 5), Error.COUNT, "n=0"),
        (Write(0, 5000, 1, RAW16, 1, 5), Error.RANGE, "columns 5000"),
        (Write(0, 0, 1, RAW16, 1, 5), Error.FLAGS, "exclusive"),
        (Write(0, 0, 1, RAW16, 1, 0), Error.ROUNDING, "bf16 destination"),
        (Write(0, 0, 1, RAW16, 0, 0), Error.RAW_ACCUMULATE, "only overwrite"),
        (Write(1, 0, 1, RAW16, 0, 0), Error.RAW_ACCUMULATE, "only overwrite"),
    ]


def _psum_with_state(geo):
    ps = Psum(geo, seed=42)
    rng = np.random.default_rng(3)
    for b in range(geo.banks):
        for row in range(geo.rows):
            ps.engine_write(b, row, _fp32_bits(rng, geo.partitions))
    ps.write(Write(1, 0, 3, BF16, SR, 1), _fp32_bits(rng, 3 * geo.partitions).reshape(3, -1))
    return ps


def _still_usable(ps, geo):
    """A legal continuation and a fresh group both still work, exactly as the rational reference."""
    before = ps.mem[1].copy()
    rand = [MarsagliaStream(ps.rand_state(p)).next_u32() >> 16 for p in range(geo.partitions)]
    val = np.full((1, geo.partitions), 0.375, np.float32)
    assert ps.write(Write(1, 1, 1, BF16, SR, 2), val) == 1
    for p in range(geo.partitions):
        want = psum_slot_reference(
            int(before[0, p]) >> 16, 0x3EC00000, "bf16", False, "sr", rand[p]
        )
        assert int(ps.mem[1, 0, p]) == (int(before[0, p]) & 0xFFFF) | (want << 16)
    assert ps.write(Write(0, 0, 1, FP32, RNE, 3), val) == 0
    assert ps.read(0, 0, 1, FP32).tolist() == [[0.375]] * geo.partitions


def test_every_rule_is_raised_by_write_and_changes_nothing():
    geo = Geometry(partitions=4, banks=3, bank_bytes=32)
    cases = _rule_cases(geo)
    assert {c[1] for c in cases} == set(Error) - {Error.NONE}
    for w, code, words in cases:
        ps = _psum_with_state(geo)
        snap = _snapshot(ps)
        assert check(w, geo, ps.groups[w.bank] if 0 <= w.bank < geo.banks else None)[0] == code
        beats = np.ones((max(w.n, 0), geo.partitions), np.float32)
        with pytest.raises(ValueError, match=words) as exc:
            ps.write(w, beats)
        assert (
            str(exc.value)
            == check(w, geo, ps.groups[w.bank] if 0 <= w.bank < geo.banks else None)[1]
        )
        _assert_unchanged(ps, snap)
        _still_usable(ps, geo)


def test_every_rule_is_reported_by_issue_and_its_beats_are_drained():
    geo = Geometry(partitions=4, banks=3, bank_bytes=32)
    for w, code, words in _rule_cases(geo):
        ps = _psum_with_state(geo)
        snap = _snapshot(ps)
        err = ps.issue(w)
        assert err is not None and err[0] == code and re.search(words, err[1]), (w, err)
        assert ps.pending == max(w.n, 0)
        for k in range(max(w.n, 0)):
            assert ps.beat(np.full(geo.partitions, 0x3F800000, np.uint32)) is None
            assert ps.pending == max(w.n, 0) - k - 1
        _assert_unchanged(ps, snap)
        with pytest.raises(ValueError, match="no write pending"):
            ps.beat(np.zeros(geo.partitions, np.uint32))
        _still_usable(ps, geo)


def test_write_and_stream_misuse():
    geo = Geometry(partitions=4, banks=2, bank_bytes=16)
    ps = _psum_with_state(geo)
    snap = _snapshot(ps)
    w = Write(0, 0, 2)
    with pytest.raises(ValueError, match=r"beats must have shape \(2, 4\) .*not \(2, 3\)"):
        ps.write(w, np.zeros((2, 3), np.uint32))
    with pytest.raises(ValueError, match=r"beats must have shape \(2, 4\) .*not \(4,\)"):
        ps.write(w, np.zeros(4, np.uint32))
    with pytest.raises(ValueError, match="beats must be uint32 bits .* not dtype float64"):
        ps.write(w, np.zeros((2, 4)))
    with pytest.raises(ValueError, match="expected an isa.Write, not 5"):
        ps.write(5, np.zeros((2, 4), np.uint32))
    with pytest.raises(ValueError, match="psum_accumulate_flag 8 does not fit its 3 bits"):
        ps.issue(Write(0, 0, 2, flags=8))
    with pytest.raises(ValueError, match="rounding 2 is neither"):
        ps.issue(Write(0, 0, 2, rounding=2))
    with pytest.raises(TypeError, match="field col must be an integer, not 1.5"):
        ps.issue(Write(0, 1.5, 2))
    _assert_unchanged(ps, snap)
    # Streaming: a beat needs a pending write; an issue needs none pending; bad beats consume
    # nothing.
    with pytest.raises(ValueError, match="beat with no write pending"):
        ps.beat(np.zeros(4, np.uint32))
    assert ps.issue(w) is None
    with pytest.raises(ValueError, match="issue while the current write still expects 2 beat"):
        ps.issue(w)
    with pytest.raises(ValueError, match="write while the current write still expects 2 beat"):
        ps.write(w, np.zeros((2, 4), np.uint32))
    with pytest.raises(ValueError, match=r"beat data must have shape \(4,\)"):
        ps.beat(np.zeros(3, np.uint32))
    with pytest.raises(ValueError, match="beat data must be uint32 bits"):
        ps.beat(np.zeros(4, np.int32))
    assert ps.pending == 2
    assert ps.beat(np.float32([1, 2, 3, 4])) is None
    assert ps.beat(np.float32([5, 6, 7, 8])) == 0
    assert ps.read(0, 0, 2, FP32).tolist() == [[1, 5], [2, 6], [3, 7], [4, 8]]


def test_bad_port_view_and_generator_arguments():
    geo = Geometry(partitions=4, banks=2, bank_bytes=16)
    ps = _psum_with_state(geo)
    snap = _snapshot(ps)
    d = np.zeros(4, np.uint32)
    bad = [
        (lambda: ps.engine_write(2, 0, d), r"bank 2 is out of range; PSUM has banks 0..1"),
        (lambda: ps.engine_write(-1, 0, d), r"bank -1 is out of range"),
        (lambda: ps.engine_write(0, 4, d), r"row 4 is out of range; a bank has rows 0..3"),
        (lambda: ps.engine_write(0, -1, d), r"row -1 is out of range"),
        (
            lambda: ps.engine_write(0, 0, d, mask=4),
            r"mask 4 is out of range; the half mask is 2 bits",
        ),
        (lambda: ps.engine_write(0, 0, d, mask=-1), r"mask -1 is out of range"),
        (lambda: ps.engine_write(0, 0, d[:3]), r"data must have shape \(4,\), not \(3,\)"),
        (lambda: ps.engine_write(0, 0, d.astype(np.int64)), r"data must be uint32 bits"),
        (lambda: ps.engine_write(0.0, 0, d), r"bank must be an integer, not 0.0"),
        (lambda: ps.engine_read(5, 0), r"bank 5 is out of range"),
        (lambda: ps.engine_read(0, 9), r"row 9 is out of range; a bank has rows 0..3"),
        (lambda: ps.read(2, 0, 1, FP32), r"bank 2 is out of range"),
        (lambda: ps.read(0, 3, 2, FP32), r"columns 3..4 do not fit a bank row of 4 fp32"),
        (lambda: ps.read(0, 0, 9, BF16), r"columns 0..8 do not fit a bank row of 8 bf16"),
        (lambda: ps.read(0, 0, 1, 3), r"dtype 3 is not a PSUM element type"),
        (
            lambda: ps.set_rand_state(4, [1] * 6),
            r"partition 4 is out of range; PSUM has partitions 0..3",
        ),
        (lambda: ps.set_rand_state(-1, [1] * 6), r"partition -1 is out of range"),
        (lambda: ps.set_rand_state(0, [1] * 5), r"six 32-bit integers .* got 5"),
        (lambda: ps.set_rand_state(0, 7), r"six 32-bit integers .* not 7"),
        (
            lambda: ps.set_rand_state(0, [1, 2, 3, 4, 2**32, 6]),
            r"generator word v=4294967296 is outside",
        ),
        (lambda: ps.set_rand_state(0, [1, 2, -3, 4, 5, 6]), r"generator word z=-3 is outside"),
        (
            lambda: ps.set_rand_state(0, [1, 2, 3.0, 4, 5, 6]),
            r"generator word z must be an integer",
        ),
        (lambda: ps.rand_state(4), r"partition 4 is out of range"),
    ]
    for call, msg in bad:
        # A wrong kind of argument is a TypeError, a wrong value a ValueError.
        with pytest.raises(TypeError if "must be an integer" in msg else ValueError, match=msg):
            call()
    _assert_unchanged(ps, snap)
    _still_usable(ps, geo)


def test_bad_constructor_arguments():
    with pytest.raises(TypeError, match="geometry must be an isa.Geometry, not 128"):
        Psum(128)
    with pytest.raises(
        ValueError, match=r"seed -1: the per-partition seeds .* must lie in \[0, 2\*\*64\)"
    ):
        Psum(seed=-1)
    with pytest.raises(ValueError, match=r"seeds 18446744073709551615..18446744073709551742"):
        Psum(seed=2**64 - 1)
    with pytest.raises(TypeError, match="seed must be an integer, not 1.0"):
        rand_states(1.0, 4)
    with pytest.raises(ValueError, match="partitions must be >= 1, not 0"):
        rand_states(0, 0)
    for kw, msg in [
        ({"partitions": 0}, "partitions must be an integer in 1..128, not 0"),
        ({"partitions": 129}, "partitions must be an integer in 1..128, not 129"),
        ({"partitions": 4.0}, "partitions must be an integer, not 4.0"),
        ({"banks": 0}, "banks must be an integer in 1..16, not 0"),
        ({"banks": 17}, "banks must be an integer in 1..16, not 17"),
        ({"bank_bytes": 12}, "bank_bytes must be a power of two in 8..4096, not 12"),
        ({"bank_bytes": 4}, "bank_bytes must be a power of two in 8..4096, not 4"),
        ({"bank_bytes": 8192}, "bank_bytes must be a power of two in 8..4096, not 8192"),
        ({"bank_bytes": "2048"}, "bank_bytes must be an integer, not '2048'"),
    ]:
        with pytest.raises(
            TypeError if "an integer, not" in msg else ValueError, match=re.escape(msg)
        ):
            Geometry(**kw)


def test_instruction_word_roundtrip():
    rng = np.random.default_rng(9)
    assert INSTR_BITS == 32 and [f for f, _ in FIELDS] == [
        "bank",
        "col",
        "n",
        "dtype",
        "rounding",
        "flags",
    ]
    for _ in range(200):
        vals = {name: int(rng.integers(0, 1 << width)) for name, width in FIELDS}
        w = Write(**vals)
        assert decode(encode(w)) == w
    assert encode(Write(1, 2, 3, BF16, SR, 6)) == 1 | 2 << 4 | 3 << 15 | 1 << 26 | 1 << 28 | 6 << 29
    with pytest.raises(ValueError, match="field flags=8 does not fit its 3 bits"):
        encode(Write(0, 0, 1, flags=8))


def test_a_write_the_word_cannot_encode_is_rejected():
    """A BF16 row of a 4 KiB bank holds 2048 values, one more than the 11-bit n field encodes:
    the golden rejects n = 2048 (COUNT) as the encoder does, and takes the row in two writes."""
    geo = Geometry(partitions=2, banks=1, bank_bytes=4096)
    assert geo.capacity(BF16) == 2048 and MAX_WRITE_N == 2047
    ps = Psum(geo)
    with pytest.raises(ValueError, match=r"n=2048 does not fit the instruction's 11-bit n field"):
        ps.write(Write(0, 0, 2048, BF16), np.zeros((2048, 2), np.uint32))
    with pytest.raises(ValueError, match="does not fit its 11 bits"):
        encode(Write(0, 0, 2048, BF16))
    for col, n in ((0, 1024), (1024, 1024)):
        w = Write(0, col, n, BF16)
        assert decode(encode(w)) == w
        ps.write(w, np.full((n, 2), 0x3F800000, np.uint32))
    assert (ps.mem[0] == 0x3F803F80).all()


# -- hammering one address -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype,rounding", [(FP32, RNE), (BF16, RNE), (BF16, SR)])
def test_hammering_one_address_equals_the_sequential_fold(dtype, rounding):
    """Back-to-back N = 1 writes into one slot lose no update: the result is the fold."""
    geo = Geometry(partitions=16, banks=2, bank_bytes=64)
    ps = Psum(geo, seed=5)
    gen = Xorwow(np.arange(5, 5 + 16, dtype=np.uint64).astype(object))  # the same seeds
    rng = np.random.default_rng(21 + int(dtype) + int(rounding))
    k = 300
    vals = _fp32_bits(rng, k * 16, exp=(120, 128), special=0.002, wild=0).reshape(k, 16)
    col = 7
    acc = None
    for i in range(k):
        flags = 1 if i == 0 else (2 if i == k - 1 else 0)
        w = Write(1, col, 1, dtype, rounding, flags)
        if i % 2:
            assert ps.issue(w) is None
            done = ps.beat(vals[i])
        else:
            done = ps.write(w, vals[i : i + 1])
        assert done == (1 if i == k - 1 else None)
        rand = gen.next_u16() if rounding == SR else None
        acc = read_add_write(
            acc, vals[i], dtype=dtype, overwrite=i == 0, rounding=rounding, rand=rand
        )
    got = ps.read(1, col, 1, dtype)[:, 0]
    assert np.array_equal(got.view(acc.dtype), acc)
    # The fold itself is the rational reference's, element by element.
    streams = [MarsagliaStream(splitmix64_state(5 + p)) for p in range(16)]
    name = dtype.name.lower()
    mode = "sr" if rounding == SR else "rne"
    for p in range(0, 16, 5):
        x = None
        for i in range(k):
            r = streams[p].next_u32() >> 16 if rounding == SR else None
            x = psum_slot_reference(x, int(vals[i, p]), name, i == 0, mode, r)
        assert int(acc[p]) == x


# -- stochastic rounding, statistically -----------------------------------------------------------


def test_sr_accumulation_tracks_the_exact_sum_where_rne_stalls():
    """1.0 + k * 2**-9 in BF16: RNE never moves (a quarter ulp rounds away), SR is unbiased.

    Every partition has its own generator, so the 128 partitions are 128 independent runs.
    """
    ps = Psum(seed=2024)
    bank, col, steps = 3, 17, 1000
    ones = np.ones((1, 128), np.float32)
    inc = np.full((1, 128), 2.0**-9, np.float32)
    ps.write(Write(bank, col, 1, BF16, SR, 1), ones)
    ps.write(Write(bank, col + 1, 1, BF16, RNE, 1), ones)
    checkpoints = {}
    for k in range(1, steps + 1):
        ps.write(Write(bank, col, 1, BF16, SR, 0), inc)
        ps.write(Write(bank, col + 1, 1, BF16, RNE, 0), inc)
        if k in (100, 500, 1000):
            checkpoints[k] = ps.read(bank, col, 2, BF16).astype(np.float64)
    for k, v in checkpoints.items():
        exact = 1.0 + k * 2.0**-9
        sr, rne = v[:, 0], v[:, 1]
        se = sr.std(ddof=1) / np.sqrt(sr.size)
        assert se > 0
        assert abs(sr.mean() - exact) < 4 * se, (k, sr.mean(), exact, se)
        assert (rne == 1.0).all()  # biased by exactly k * 2**-9
        assert exact - rne.mean() > 50 * se
        # SR only ever lands on the BF16 neighbours reachable from the path: stays within range.
        assert sr.min() > 1.0 and sr.max() < exact + 0.5


def test_sr_roundings_of_one_value_average_to_it():
    """Overwriting with the same FP32 value many times: the SR mean is the value."""
    ps = Psum(seed=77)
    x = np.float32(1.0 + 2.0**-9 + 2.0**-12 + 2.0**-20)  # 0.32 ulp above a BF16 value
    beats = np.full((1024, 128), x, np.float32)
    ps.write(Write(5, 0, 1024, BF16, SR, 3), beats)
    ps.write(Write(6, 0, 1024, BF16, RNE, 3), beats)
    sr = ps.read(5, 0, 1024, BF16).astype(np.float64)
    rne = ps.read(6, 0, 1024, BF16).astype(np.float64)
    lo, step = 1.0, 2.0**-7
    assert set(np.unique(sr)) == {lo, lo + step}
    p_up = (float(x) - lo) / step
    se = step * np.sqrt(p_up * (1 - p_up) / sr.size)
    assert abs(sr.mean() - float(x)) < 4 * se
    assert (rne == lo).all() and float(x) - rne.mean() > 100 * se


# -- arbiter ------------------------------------------------------------------------------------


def test_arbiter_hand_worked_examples():
    assert PORTS == ("te", "ve", "se")
    a = Arbiter()
    assert a.order == [0, 1, 2]
    # Nobody presents; then everyone on a different bank: all granted, nobody beat anyone.
    assert a.step([None, None, None]) == (False, False, False)
    assert a.step([0, 1, 2]) == (True, True, True) and a.order == [0, 1, 2]
    # TE and VE on bank 4: TE first in order wins and moves to the end.
    assert a.step([4, 4, None]) == (True, False, False) and a.order == [1, 2, 0]
    # Again: now VE is ahead of TE.
    assert a.step([4, 4, None]) == (False, True, False) and a.order == [2, 0, 1]
    # SE alone on bank 7 is granted but keeps its place (it beat nobody); TE beats VE on bank 4.
    assert a.step([4, 4, 7]) == (True, False, True) and a.order == [2, 1, 0]
    # SE and VE on bank 0, TE on bank 1: SE (first) beats VE and goes to the end.
    assert a.step([1, 0, 0]) == (True, False, True) and a.order == [1, 0, 2]
    # All three on one bank: the head of the order wins.
    assert a.step([3, 3, 3]) == (False, True, False) and a.order == [0, 2, 1]
    assert a.step([3, 3, 3]) == (True, False, False) and a.order == [2, 1, 0]
    assert a.step([3, 3, 3]) == (False, False, True) and a.order == [1, 0, 2]
    # A loser that stops presenting costs the winner nothing more.
    assert a.step([None, 2, None]) == (False, True, False) and a.order == [1, 0, 2]
    # .order is a copy.
    a.order.append(9)
    assert a.order == [1, 0, 2]


def test_arbiter_fairness_under_full_contention():
    for contenders in ([0, 1], [0, 2], [1, 2], [0, 1, 2]):
        a = Arbiter()
        winners = []
        for _ in range(60):
            banks = [6 if p in contenders else None for p in range(3)]
            g = a.step(banks)
            assert sum(g) == 1
            winners.append(g.index(True))
        counts = [winners.count(p) for p in contenders]
        assert max(counts) - min(counts) == 0, (contenders, counts)
        # Round robin: between two grants of a port, every other contender is granted once.
        for p in contenders:
            idx = [i for i, x in enumerate(winners) if x == p]
            assert all(j - i == len(contenders) for i, j in zip(idx, idx[1:]))


def test_arbiter_bounded_wait_with_random_persistent_requests():
    """Requests stay up until granted (valid/ready); nobody waits more than two grants of its
    bank, and requests to other banks never delay it."""
    rng = np.random.default_rng(12)
    a = Arbiter()
    req = [None, None, None]
    waited = [0, 0, 0]  # grants of the requested bank to others while waiting
    for _ in range(5000):
        for p in range(3):
            if req[p] is None and rng.random() < 0.7:
                req[p] = int(rng.integers(0, 2))
        g = a.step(req)
        for p in range(3):
            if req[p] is None:
                continue
            # Some port was granted the bank of each presenting port.
            assert any(g[q] and req[q] == req[p] for q in range(3))
            if g[p]:
                waited[p] = 0
            else:
                waited[p] += 1
                assert waited[p] <= 2, (p, req, a.order)
        req = [None if g[p] else req[p] for p in range(3)]


def test_arbiter_banks_are_independent():
    """VE and SE sharing bank 1 see the same grants whether TE uses bank 0 or not."""
    a, b = Arbiter(), Arbiter()
    rng = np.random.default_rng(13)
    for _ in range(200):
        ve = int(rng.integers(1, 3)) if rng.random() < 0.9 else None
        se = int(rng.integers(1, 3)) if rng.random() < 0.9 else None
        ga = a.step([0, ve, se])
        gb = b.step([None, ve, se])
        assert ga[0] and ga[1:] == gb[1:]


def test_arbiter_bad_input():
    a = Arbiter()
    with pytest.raises(ValueError, match=r"one bank or None per port \('te', 've', 'se'\)"):
        a.step([0, 1])
    with pytest.raises(ValueError, match="bank of port se must be None or an integer >= 0, not -1"):
        a.step([0, 1, -1])
    with pytest.raises(
        ValueError, match="bank of port te must be None or an integer >= 0, not 1.0"
    ):
        a.step([1.0, None, None])
    assert a.order == [0, 1, 2]


@pytest.mark.parametrize("dtype,rounding", [("fp32", "rne"), ("bf16", "rne"), ("bf16", "sr")])
def test_write_to_some_lanes(dtype, rounding):
    """A write to a column tile's partitions leaves the other partitions' slots as they were
    and gives its own exactly what a write to every partition gives them (the SR generators
    stepping for all partitions in both)."""
    from ncrtl.model.psum import Dtype, Flag, Geometry, Psum, Rounding, Write

    rng = np.random.default_rng(3)
    g = Geometry(8, 2, 64)
    d = Dtype.FP32 if dtype == "fp32" else Dtype.BF16
    r = Rounding.SR if rounding == "sr" else Rounding.RNE
    w = Write(1, 2, 5, d, r, int(Flag.FIRST_ACCUMULATE | Flag.LAST))
    beats = rng.standard_normal((5, 8)).astype(np.float32).view(np.uint32)
    start = rng.integers(0, 2**32, size=(2, 16, 8), dtype=np.uint64).astype(np.uint32)
    full, part = Psum(g, seed=5), Psum(g, seed=5)
    full.mem[...] = part.mem[...] = start
    full.write(w, beats)
    part.write(w, beats, lanes=slice(2, 6))
    assert (part.mem[:, :, 2:6] == full.mem[:, :, 2:6]).all()
    assert (part.mem[:, :, :2] == start[:, :, :2]).all() and (
        part.mem[:, :, 6:] == start[:, :, 6:]
    ).all()
    assert all(part.rand_state(p) == full.rand_state(p) for p in range(8))
