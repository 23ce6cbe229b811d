"""Golden model of the M:N structured-sparse matmul (``nc_matmul_sparse``, NeuronCore-v3 on).

The contract is docs/tensor_engine.md ("Sparse matmul").  In short:

* A dense stationary ``D [4 R G, M]`` (``R`` the compression ratio 2, 3 or 4: patterns 4:8,
  4:12, 4:16) keeps at most :data:`SPARSE_GROUP` = 4 non-zeros in every group of ``N = 4 R``
  consecutive rows of a column.  Compressed, it is ``values [4 G, M]``: compressed row
  ``4 g + j`` of column ``m`` holds the ``j``-th kept element of group ``g``, with a 4-bit tag
  giving its position in the group.
* The moving tile is ``[K, R, N]`` with ``K = 4 G`` partitions: the dense moving ``X [K R, N]``
  reshaped (``X.reshape(K, R, N)``), so partition ``p`` holds the ``R`` consecutive rows
  ``p R .. p R + R - 1`` and group ``g``'s ``4 R`` rows lie in partitions ``4 g .. 4 g + 3``.
* A tag is *physical*: bits ``[1:0]`` the element ``e < R`` within the partition, bits
  ``[3:2]`` the partition ``o`` within the group (position ``o R + e``).  Four tags pack into a
  uint16, the tag of column ``m`` in bits ``[4 (m % 4), 4 (m % 4) + 4)`` of ``tag[p, m // 4]``
  (seed 000's ``[128, 32]`` uint16 tensor for 128 x 128).  :func:`squeeze_tags` makes it from
  positions (seed 000's ``squeeze_tags``), :func:`expand_tags` undoes it.
* PE ``(p, m)`` multiplies its compressed element by ``moving[4 (p // 4) + o, e, n]`` and the
  column's chain is the dense one's: ``acc = +0``; for ``p = 0 .. K-1``:
  ``acc = round_fp32(acc + values[p, m] * moving[4 (p // 4) + o[p, m], e[p, m], n])``, one
  correctly rounded step per compressed row (:func:`ncrtl.model.fp.fp32_dot_add`).

Against the dense golden on the decompressed stationary (``matmul(decompress(...), X)`` over
``K R`` rows): the sparse chain is the dense chain without the steps whose stationary element
is a zero the compression dropped.  Such a step adds ``+0 * x``: exact, and it leaves a
non-zero psum as it is.  So the two agree bit for bit when the tags of each group ascend (what
:func:`compress` writes), the moving is finite wherever the dense stationary is zero
(``0 * Inf`` is NaN in the dense chain only), and except for the sign of a zero result (a psum
of ``-0`` from a tiny negative product turns ``+0`` on a dropped ``+0 * x`` step with
``x >= +0``).
"""

import numpy as np

from ncrtl.model.fp import decode
from ncrtl.model.modes import SPARSE_GROUP, SPARSE_MODES, SPARSE_RATIOS, mode_by_code

from .isa import Error, Mode
from .matmul import (
    InstructionError,
    _array_size,
    _check_pair,
    _instructions,
    _operand,
    _short_products,
    float64_chain,
    mode_of,
)

__all__ = [
    "matmul_sparse",
    "sparse_instructions",
    "squeeze_tags",
    "expand_tags",
    "pack_tags",
    "unpack_tags",
    "compress",
    "decompress",
    "check_tags",
    "TAG_BITS",
    "TAGS_PER_WORD",
]

#: Bits of one tag: the minimal width of a position within the largest group (16).
TAG_BITS = 4

#: Tags packed in one uint16 word of the tag tensor.
TAGS_PER_WORD = 16 // TAG_BITS

#: Bits of a physical tag that select the element within a partition (the rest: the partition).
_ELEMENT_BITS = 2

# Every sparse format pair has short products: the float64 chain is the contract's rounding.
assert all(_short_products(a, b) for m in SPARSE_MODES for a in m.formats_s for b in m.formats_m)


def _ratio(compress_ratio):
    """The compression ratio as an int, or InstructionError (``Error.SPARSE``) naming it."""
    if isinstance(compress_ratio, (bool, np.bool_)) or not isinstance(
        compress_ratio, (int, np.integer)
    ):
        ok = False
    else:
        ok = int(compress_ratio) in SPARSE_RATIOS
    if not ok:
        raise InstructionError(
            f"compress_ratio {compress_ratio!r} is not one the Tensor Engine has; ratios: "
            + ", ".join(f"{r} (4:{SPARSE_GROUP * r})" for r in SPARSE_RATIOS),
            Error.SPARSE,
        )
    return int(compress_ratio)


def pack_tags(physical):
    """Pack physical tags ``[K, M]`` (ints 0..15) four to a uint16: ``[K, ceil(M / 4)]``, the tag
    of column ``m`` in bits ``[4 (m % 4), +4)`` of word ``m // 4`` (unused nibbles 0)."""
    t = np.asarray(physical)
    if t.ndim != 2:
        raise InstructionError(f"tags must be [K, M], got shape {t.shape}")
    if t.size and (t.min() < 0 or t.max() >= 1 << TAG_BITS):
        raise InstructionError(f"a tag must be in 0..{(1 << TAG_BITS) - 1}, got {int(t.max())}")
    k, m = t.shape
    words = -(-m // TAGS_PER_WORD)
    padded = np.zeros((k, words * TAGS_PER_WORD), dtype=np.uint16)
    padded[:, :m] = t
    nib = padded.reshape(k, words, TAGS_PER_WORD)
    shifts = (TAG_BITS * np.arange(TAGS_PER_WORD)).astype(np.uint16)
    return (nib << shifts).sum(axis=2, dtype=np.uint16)


def unpack_tags(tag, m):
    """The physical tags ``[K, m]`` (uint8) of a packed uint16 tag tensor (:func:`pack_tags`)."""
    t = np.asarray(tag)
    if t.dtype != np.uint16 or t.ndim != 2:
        raise InstructionError(
            f"tag must be a uint16 tensor [K, ceil(M / 4)], got {t.dtype} {t.shape}"
        )
    words = -(-m // TAGS_PER_WORD)
    if t.shape[1] != words:
        raise InstructionError(
            f"tag has {t.shape[1]} words per partition; M={m} columns need {words} "
            f"(4 tags of 4 bits in each uint16)"
        )
    shifts = (TAG_BITS * np.arange(TAGS_PER_WORD)).astype(np.uint16)
    nib = (t[:, :, None] >> shifts) & ((1 << TAG_BITS) - 1)
    return nib.reshape(t.shape[0], -1)[:, :m].astype(np.uint8)


def squeeze_tags(positions, compress_ratio):
    """Seed 000's ``squeeze_tags``: positions within each group (``[K, M]``, 0 .. 4R-1) to the
    packed physical tag tensor (uint16 ``[K, ceil(M / 4)]``): position ``t`` is partition
    ``t // R`` and element ``t % R`` of the group, tag ``(t // R) << 2 | t % R``."""
    r = _ratio(compress_ratio)
    t = np.asarray(positions)
    if t.ndim != 2:
        raise InstructionError(f"positions must be [K, M], got shape {t.shape}")
    if t.size and (t.min() < 0 or t.max() >= SPARSE_GROUP * r):
        bad = tuple(int(i) for i in np.argwhere((t < 0) | (t >= SPARSE_GROUP * r))[0])
        raise InstructionError(
            f"position {int(t[bad])} at {list(bad)} is outside a 4:{SPARSE_GROUP * r} group "
            f"(positions 0..{SPARSE_GROUP * r - 1})",
            Error.TAG,
        )
    t = t.astype(np.int64)
    return pack_tags(((t // r) << _ELEMENT_BITS) | (t % r))


def expand_tags(tag, compress_ratio, m):
    """The positions within each group (``[K, m]``, int64) of a packed physical tag tensor:
    :func:`squeeze_tags` undone, every tag checked (:func:`check_tags`)."""
    r = _ratio(compress_ratio)
    phys = unpack_tags(tag, m)
    check_tags(phys, r)
    return (phys >> _ELEMENT_BITS).astype(np.int64) * r + (phys & ((1 << _ELEMENT_BITS) - 1))


def check_tags(physical, compress_ratio):
    """The tag rules (``Error.TAG``): every tag's element below the ratio, and the 4 tags of a
    group (compressed rows ``4 g .. 4 g + 3`` of a column) all different."""
    r = _ratio(compress_ratio)
    t = np.asarray(physical).astype(np.int64)
    elem = t & ((1 << _ELEMENT_BITS) - 1)
    if (elem >= r).any():
        p, m = (int(i) for i in np.argwhere(elem >= r)[0])
        raise InstructionError(
            f"tag[{p}, {m}] = {int(t[p, m])} selects element {int(elem[p, m])} of a partition; "
            f"compress_ratio {r} (4:{SPARSE_GROUP * r}) has elements 0..{r - 1} (a tag is "
            f"partition << 2 | element)",
            Error.TAG,
        )
    k = t.shape[0]
    g = t[: k - k % SPARSE_GROUP].reshape(-1, SPARSE_GROUP, t.shape[1])
    s = np.sort(g, axis=1)
    dup = (s[:, 1:] == s[:, :-1]).any(axis=1)
    if dup.any():
        gi, m = (int(i) for i in np.argwhere(dup)[0])
        rows = list(range(SPARSE_GROUP * gi, SPARSE_GROUP * gi + SPARSE_GROUP))
        raise InstructionError(
            f"tags {[int(v) for v in g[gi, :, m]]} of rows {rows} (group {gi}), column {m} "
            f"repeat a position; the {SPARSE_GROUP} non-zeros of a group have different "
            f"positions",
            Error.TAG,
        )


def _validate(moving, stationary, tag, compress_ratio, rows, cols, sf, mf, tile_unit, tags=True):
    """Check every rule; return ``(x, fm, s, fs, ratio, physical tags or None)``."""
    r = _ratio(compress_ratio)
    _array_size(rows, cols, tile_unit)
    s, fs = _operand(stationary, sf, "stationary")
    x, fm = _operand(moving, mf, "moving")
    mode, fmt_s, fmt_m = mode_of(fs, fm)
    if not mode_by_code(mode).sparse:
        raise InstructionError(
            f"a sparse matmul takes {', '.join(m.name for m in SPARSE_MODES)} operands, not "
            f"{fs.name} x {fm.name}",
            Error.SPARSE,
        )
    if s.ndim != 2 or x.ndim != 3 or x.shape[1] != r or x.shape[0] != s.shape[0]:
        raise InstructionError(
            f"sparse operands must be stationary [K, M] (compressed) and moving "
            f"[K, compress_ratio={r}, N], got stationary {s.shape} and moving {x.shape}"
        )
    k, m, n = s.shape[0], s.shape[1], x.shape[2]
    _check_pair(
        (Mode(mode), fmt_s, fmt_m, False),
        s,
        x,
        (m, n),
        None,
        None,
        rows,
        cols,
        tile_unit,
        sparse=r,
    )
    t = np.asarray(tag)
    want = (k, -(-m // TAGS_PER_WORD))
    if t.dtype != np.uint16 or t.shape != want:
        raise InstructionError(
            f"tag must be uint16 {list(want)} (4 tags of 4 bits per word for M={m}), got "
            f"{t.dtype} {list(t.shape)}"
        )
    phys = None
    if tags:
        phys = unpack_tags(t, m)
        check_tags(phys, r)
    return x, fm, s, fs, r, phys, (Mode(mode), fmt_s, fmt_m)


def sparse_instructions(
    moving,
    stationary,
    tag,
    compress_ratio,
    *,
    rows=128,
    cols=128,
    stationary_format=None,
    moving_format=None,
    tile_unit=32,
):
    """The LoadStationary and MultiplyMoving of one :func:`matmul_sparse` call, every rule but
    the tags' values checked, nothing computed (the operands need only their shapes and
    dtypes)."""
    x, _, s, _, r, _, (mode, fmt_s, fmt_m) = _validate(
        moving,
        stationary,
        tag,
        compress_ratio,
        rows,
        cols,
        stationary_format,
        moving_format,
        tile_unit,
        tags=False,
    )
    return _instructions(
        mode, fmt_s, fmt_m, s.shape[0], s.shape[1], x.shape[2], False, None, None, sparse=r
    )


def matmul_sparse(
    moving,
    stationary,
    tag,
    compress_ratio,
    *,
    rows=128,
    cols=128,
    stationary_format=None,
    moving_format=None,
    tile_unit=32,
):
    """Golden result of one sparse matmul (``nc_matmul_sparse(moving, stationary, tag,
    compress_ratio)``).

    Parameters
    ----------
    moving : ndarray ``[K, R, N]``
        Dense moving data: partition ``p`` holds rows ``p R .. p R + R - 1`` of the dense
        ``[K R, N]`` moving (its reshape).  float32 (with ``moving_format="tf32"``),
        ``ml_dtypes.bfloat16``, float16 or an FP8 dtype.
    stationary : ndarray ``[K, M]``
        The compressed stationary (:func:`compress`): 4 elements per group of ``4 R`` dense
        rows, ``K`` a multiple of 4.
    tag : ndarray uint16 ``[K, ceil(M / 4)]``
        Packed physical tags (:func:`squeeze_tags`).
    compress_ratio : int
        2, 3 or 4 (4:8, 4:12, 4:16); ``moving.shape[1]``.
    rows, cols, stationary_format, moving_format, tile_unit
        As :func:`ncrtl.model.tensor_engine.matmul` (no tiling, no transpose with sparse).

    Returns
    -------
    ndarray ``[M, N]`` of float32: the chains of the module's contract.

    Raises
    ------
    InstructionError (ValueError)
        A ratio other than 2, 3, 4, operands no sparse mode takes (fp32, MX, mixed), shapes
        that do not fit (K not a multiple of 4 or above the rows, M above the columns, N above
        512, moving not ``[K, R, N]``), a tag tensor of the wrong dtype or shape, a tag whose
        element is not below the ratio or that repeats a position within its group.
    """
    x, fm, s, fs, r, phys, _ = _validate(
        moving,
        stationary,
        tag,
        compress_ratio,
        rows,
        cols,
        stationary_format,
        moving_format,
        tile_unit,
    )
    k, m, n = s.shape[0], s.shape[1], x.shape[2]
    sv, xv = decode(s, fs), decode(x, fm)
    part = phys.astype(np.int64) >> _ELEMENT_BITS
    elem = phys.astype(np.int64) & ((1 << _ELEMENT_BITS) - 1)

    def steps():
        for p in range(k):
            base = SPARSE_GROUP * (p // SPARSE_GROUP)
            # column m's operand: element elem[p, m] of partition base + part[p, m], all n
            picked = xv[base + part[p], elem[p]]
            yield sv[p][:, None] * picked

    return float64_chain(steps(), m, n)


def compress(dense, compress_ratio, mask=None):
    """Compress a dense stationary ``[4 R G, M]`` to ``(values [4 G, M], tag)``.

    The kept positions of each group of ``4 R`` rows and column are the mask's (``mask``: bool
    ``[4 R G, M]``, at most 4 per group) or, without a mask, the non-zeros (``-0`` is zero);
    a group with fewer than 4 is filled with its first unkept positions (zeros).  Kept
    positions ascend within a group, so :func:`matmul_sparse` agrees with the dense golden
    (module docstring).  ``values`` has ``dense``'s dtype; ``tag`` is the packed physical tag
    tensor.  A group with more than 4 kept positions, or a non-zero outside the mask, is an
    error naming the column and rows."""
    r = _ratio(compress_ratio)
    d = np.asarray(dense)
    span = SPARSE_GROUP * r
    if d.ndim != 2 or d.shape[0] % span or not d.shape[0]:
        raise InstructionError(
            f"a dense stationary must be [K, M] with K a multiple of {span} (groups of "
            f"4:{span}), got shape {d.shape}"
        )
    k_dense, m = d.shape
    fmt = _operand(d, "tf32" if d.dtype == np.float32 else None, "stationary")[1]
    nonzero = decode(d, fmt) != 0
    nonzero |= np.isnan(decode(d, fmt))
    if mask is None:
        keep = nonzero
    else:
        keep = np.asarray(mask, dtype=bool)
        if keep.shape != d.shape:
            raise InstructionError(f"mask shape {keep.shape} must equal the stationary's {d.shape}")
        outside = nonzero & ~keep
        if outside.any():
            row, col = (int(i) for i in np.argwhere(outside)[0])
            raise InstructionError(
                f"stationary[{row}, {col}] = {d[row, col]!r} is non-zero outside the mask: "
                f"the 4:{span} pattern keeps only the mask's positions"
            )
    groups = k_dense // span
    kg = keep.reshape(groups, span, m)
    count = kg.sum(axis=1)
    if (count > SPARSE_GROUP).any():
        g, col = (int(i) for i in np.argwhere(count > SPARSE_GROUP)[0])
        rows = [g * span + int(i) for i in np.nonzero(kg[g, :, col])[0]]
        what = "mask keeps" if mask is not None else "holds non-zeros at"
        raise InstructionError(
            f"stationary column {col}, group {g} (rows {g * span}..{g * span + span - 1}) "
            f"{what} rows {rows}: more than {SPARSE_GROUP} in a 4:{span} group"
        )
    # The kept positions first (ascending), then the unkept ones (ascending): a stable
    # argsort of "not kept" orders each group's positions so.
    order = np.argsort(~kg, axis=1, kind="stable")[:, :SPARSE_GROUP, :]
    pos = np.sort(order, axis=1)  # ascending positions within the group
    rows = (np.arange(groups)[:, None, None] * span + pos).reshape(groups * SPARSE_GROUP, m)
    values = np.take_along_axis(d, rows, axis=0)
    positions = pos.reshape(groups * SPARSE_GROUP, m)
    return values, squeeze_tags(positions, r)


def decompress(values, tag, compress_ratio):
    """The dense stationary ``[K R, M]`` of compressed ``values [K, M]`` and packed tags: each
    value at its group's position, zeros (``+0``) elsewhere; the tags are checked
    (:func:`check_tags`)."""
    r = _ratio(compress_ratio)
    v = np.asarray(values)
    if v.ndim != 2 or v.shape[0] % SPARSE_GROUP:
        raise InstructionError(
            f"compressed values must be [K, M] with K a multiple of {SPARSE_GROUP}, got "
            f"shape {v.shape}"
        )
    k, m = v.shape
    pos = expand_tags(tag, r, m)
    if pos.shape[0] != k:
        raise InstructionError(f"tag has {pos.shape[0]} partitions; the values have {k}")
    out = np.zeros((k * r, m), dtype=v.dtype)
    rows = (np.arange(k) // SPARSE_GROUP * SPARSE_GROUP * r)[:, None] + pos
    np.put_along_axis(out, rows, v, axis=0)
    return out
