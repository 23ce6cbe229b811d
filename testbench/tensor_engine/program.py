"""Tensor Engine programs: instruction sequences with their data, and their expected results.

A :class:`Program` is a list of :class:`Step` (an instruction plus the stationary or moving tile it
streams).  :func:`random_program` draws one for a mode; :meth:`Program.expected` runs the golden
model (values) and the timing model (cycles) on it.  The cocotb testbench
(``ncrtl.testbench.tensor_engine.test_tensor_engine``) streams a program into the RTL and compares.
"""

from dataclasses import dataclass, field, replace

import numpy as np

from ncrtl.hdl.tensor_engine.pe import LANE_WIDTH
from ncrtl.model.fp import encode, get_format
from ncrtl.model.modes import operation
from ncrtl.model.tensor_engine import isa, timing
from ncrtl.model.tensor_engine.isa import Instruction, Op

__all__ = [
    "Step",
    "Program",
    "random_program",
    "sparse_program",
    "parallel_program",
    "background_program",
    "random_scales",
    "special_values",
    "lane_words",
    "tile_shape",
]


def tile_shape(pe_mode, k, x):
    """Shape of a stationary (``x = M``) or moving (``x = N``) tile of encodings in a mode:
    ``[K, X]``, ``[K, P, X]`` with ``P`` products per PE step (double_row: 2), or ``[K, X, 4]``
    in the MX mode (packed elements last, as ``nc_matmul_mx`` takes them)."""
    if pe_mode.scale:
        return (k, x, pe_mode.products)
    return (k, pe_mode.products, x) if pe_mode.products > 1 else (k, x)


@dataclass
class Step:
    """One instruction and its data (encodings, uint arrays): stationary ``[K, M]`` (or
    ``[K, P, M]``, ``[K, M, 4]``: :func:`tile_shape`) for an LS, moving ``[K, N]`` (or
    ``[K, P, N]``, ``[K, N, 4]``) for an MM; in the MX mode ``scale`` holds the E8M0 scale of
    every PE row, ``[K, M]`` or ``[K, N]`` uint8.  A sparse LS has the compressed stationary
    ``[K, M]`` and its physical tags ``tags`` ``[K, M]``; a sparse MM the moving ``[K, R,
    N]``."""

    ins: Instruction
    data: np.ndarray = None
    scale: np.ndarray = None
    tags: np.ndarray = None


@dataclass
class Program:
    rows: int
    cols: int
    steps: list = field(default_factory=list)
    #: The engine's tile unit (32 on the hardware; :func:`isa.check`).
    tile_unit: int = 32
    #: For an engine with parallel tiles (``TensorEngine(parallel_tiles=True)``).
    parallel: bool = False
    #: For an engine with the background transpose plane
    #: (``TensorEngine(background_transpose=True)``).
    background: bool = False
    #: For an engine with the sparse path (``TensorEngine(sparse=True)``): its moving lane
    #: word's bits and a sparse element's slot (``TensorEngine.x_width``,
    #: ``pe.sparse_slot_width``).
    sparse: bool = False
    x_width: int = LANE_WIDTH
    slot: int = 0

    def instructions(self):
        return [s.ins for s in self.steps]

    @property
    def split(self):
        """Streams per lane group (parallel tiles) or per plane (background plane), and a
        result word carrying a vector per output tap or plane."""
        return self.parallel or self.background

    def schedule(self):
        """The timing model's schedule of the program on its engine (``timing.HDL_PARALLEL``
        with parallel tiles, ``timing.HDL_BACKGROUND`` with the background plane, else
        ``timing.HDL_SERIAL``)."""
        rules = timing.HDL_SERIAL
        if self.parallel:
            rules = timing.HDL_PARALLEL
        elif self.background:
            rules = timing.HDL_BACKGROUND
        return timing.simulate(
            self.instructions(), self.rows, self.cols, tile_unit=self.tile_unit, rules=rules
        )

    def placed_steps(self):
        """Steps the engine accepts as ``(step, its LS for an MM, plane)``: ``isa.check`` in
        program order on the serial engine; else the timing model's records (``TILE_BUSY``
        depends on timing; the plane on the instruction sequence) and, for an MM, the latest
        accepted LS on its tile (any tile without parallel tiles)."""
        out, last_ls = [], None
        if self.split:
            held = {}
            for s, rec in zip(self.steps, self.schedule().records):
                if rec.accepted:
                    w = s.ins.whole(self.rows, self.cols)
                    region = (w.tile_row, w.tile_rows, w.tile_col, w.tile_cols)
                    region = region if self.parallel else None
                    if s.ins.op == Op.LS:
                        held[region] = s.ins
                    out.append((s, held[region], rec.plane))
            return out
        for s in self.steps:
            err = isa.check(
                s.ins, self.rows, self.cols, last_ls, tile_unit=self.tile_unit, sparse=self.sparse
            )
            if err is None:
                if s.ins.op == Op.LS:
                    last_ls = s.ins
                out.append((s, last_ls, 0))
        return out

    def valid_steps(self):
        """Steps the engine accepts, with their LS for MMs (:meth:`placed_steps`)."""
        return [(s, ls) for s, ls, _ in self.placed_steps()]


def lane_words(tile, scale=None, *, tags=None, slot=None):
    """Beat lane words of a tile of encodings: ``[K, X]`` -> one int per (x, k) lane, as
    ``[X, K]`` array; a ``[K, P, X]`` tile (double_row) or, with ``scale``, a ``[K, X, 4]``
    MX tile packs value ``j`` in bits ``[8j, 8j+8)`` of the lane word (FP4 in the low 4 bits
    of its byte), and the row's E8M0 scale ``scale[k, x]`` goes to bits ``[32, 40)``.  A
    sparse stationary ``[K, M]`` with ``tags`` puts each tag in bits ``[32, 36)``; a sparse
    moving ``[K, R, N]`` with ``slot`` packs element ``e`` in bits ``[e slot, +slot)`` (Python
    ints: the words may be wider than 64 bits)."""
    t = np.asarray(tile).astype(np.int64)
    if slot is not None:
        out = np.empty((t.shape[2], t.shape[0]), dtype=object)
        for x in range(t.shape[2]):
            for k in range(t.shape[0]):
                out[x, k] = sum(int(v) << (slot * e) for e, v in enumerate(t[k, :, x]))
        return out
    if tags is not None:
        return (t | (np.asarray(tags).astype(np.int64) << 32)).T
    if scale is not None:
        t = sum(t[:, :, j] << (8 * j) for j in range(t.shape[2]))
        t = t | (np.asarray(scale).astype(np.int64) << 32)
    elif t.ndim == 3:
        t = sum(t[:, j, :] << (8 * j) for j in range(t.shape[1]))
    return t.T


def random_scales(rng, shape, special=0.02):
    """Random E8M0 scale bytes: mostly within a few binades of 1.0 (127), a fraction
    ``special`` of extremes (0, 254: sums far below and above the FP32 range) and NaNs (255),
    one NaN to six extremes."""
    sc = 127 + rng.integers(-6, 7, shape)
    pick = rng.random(shape)
    sc = np.where(pick < special, rng.choice([0, 1, 60, 200, 253, 254], shape), sc)
    sc = np.where(pick > 1 - special / 6, 255, sc)
    return sc.astype(np.uint8)


def _values(rng, fmt, shape, special=0.01):
    """Random encodings of ``fmt`` spread over a few binades around 1 (so sums interact), with
    a sprinkle of zeros, subnormals, Inf and NaN."""
    f = get_format(fmt)
    n = int(np.prod(shape))
    mag = np.exp2(rng.integers(-4, 5, n)) * (1 + rng.random(n))
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    v = sign * np.minimum(mag, f.max_finite)
    codes = encode(v, f).astype(np.int64)
    pick = rng.random(n)
    corner = np.array([0, 1 << (f.bits - 1), 1], dtype=np.int64)  # +0, -0, smallest subnormal
    codes = np.where(pick < 3 * special, corner[rng.integers(0, 3, n)], codes)
    if f.special == "ieee":
        inf = ((1 << f.exp_bits) - 1) << f.man_bits
        codes = np.where((pick >= 3 * special) & (pick < 3.5 * special), inf, codes)
        codes = np.where((pick >= 3.5 * special) & (pick < 4 * special), inf | 1, codes)
    return codes.reshape(shape).astype(f.storage_dtype)


def special_values(rng, fmt, shape, share=0.1, nonfinite=0.01):
    """Random encodings of ``fmt`` as :func:`_values` draws them, with special codes mixed in: a
    fraction ``share`` of signed zeros and random subnormals (both signs), and a fraction
    ``nonfinite`` of infinities and NaNs with random payloads (those the format has).  A caller
    sizes ``nonfinite`` to its contraction length so that only some outputs are NaN or Inf."""
    f = get_format(fmt)
    codes = _values(rng, fmt, shape, special=0).astype(np.int64).reshape(-1)
    n = codes.size
    sign = rng.integers(0, 2, n).astype(np.int64) << (f.bits - 1)
    man = rng.integers(1, 1 << f.man_bits, n).astype(np.int64)
    ones = ((1 << f.exp_bits) - 1) << f.man_bits
    finite = np.where(rng.random(n) < 0.5, sign, sign | man)  # a zero or a subnormal
    codes = np.where(rng.random(n) < share, finite, codes)
    kinds = ([sign | ones] if f.has_inf else []) + (
        [sign | ones | man] if f.special == "ieee" else []
    )
    if f.special == "fn":
        kinds.append(sign | ones | ((1 << f.man_bits) - 1))  # S.1111.111, its only NaN
    if kinds:
        which = np.choose(rng.integers(0, len(kinds), n), kinds)
        codes = np.where(rng.random(n) < nonfinite, which, codes)
    return codes.reshape(shape).astype(f.storage_dtype)


def _selection(rng, k, n, fmt):
    """A 0/1 selection matrix [K, N]: each column one 1 (or none), as encodings of ``fmt``."""
    one = int(encode(np.array([1.0]), fmt)[0])
    sel = np.zeros((k, n), dtype=np.int64)
    rows = rng.integers(0, k, n)
    has = rng.random(n) < 0.95
    sel[rows[has], np.nonzero(has)[0]] = one
    return sel.astype(get_format(fmt).storage_dtype)


def _random_tile(rng, rows, cols, pe_mode):
    """``(tile_row, tile_rows, tile_col, tile_cols)`` of a random row or column tile of a size
    the mode accepts, or the whole array; tiles need a 64 x 64 array or larger."""
    axes = [a for a, sizes in (("row", pe_mode.row_tiles), ("col", pe_mode.col_tiles)) if sizes]
    if rows < 64 or cols < 64 or not axes or rng.random() < 0.4:
        return 0, 0, 0, 0
    axis = axes[int(rng.integers(0, len(axes)))]
    size = int(rng.choice(pe_mode.row_tiles if axis == "row" else pe_mode.col_tiles))
    if axis == "row":
        return size * int(rng.integers(0, rows // size)), size, 0, 0
    return 0, 0, size * int(rng.integers(0, cols // size)), size


def random_program(rng, rows, cols, op_name, *, groups=3, max_n=128, errors=True, tile_unit=32):
    """A random program of ``groups`` LS + 1..3 MM groups of one operation
    (:func:`ncrtl.model.modes.operations`: a mode's matmul or transpose), with illegal
    instructions mixed in when ``errors``; on arrays of 64 x 64 and more, most groups run on a
    random row or column tile of the mode (double_row has none).  K and M are multiples of the
    mode's granules (MX: K of :meth:`PeMode.k_step`, M even) on an engine of ``tile_unit``."""
    pe_mode, transpose = operation(op_name)
    prog = Program(rows, cols, tile_unit=tile_unit)
    k_step, m_step = pe_mode.k_step(tile_unit), pe_mode.m_multiple
    if k_step > rows or m_step > cols:
        raise ValueError(
            f"{op_name} needs K a multiple of {k_step} and M of {m_step}: no instruction fits "
            f"a {rows} x {cols} engine of tile_unit {tile_unit}"
        )
    for _ in range(groups):
        tile = _random_tile(rng, rows, cols, pe_mode)
        prog.steps += tile_steps(
            rng,
            rows,
            cols,
            pe_mode,
            transpose,
            tile,
            1,
            max_n,
            tile_unit,
            most_mms=3,
            mx_bf16=True,
            errors=errors,
        )
    return prog


def sparse_program(
    rng, rows, cols, *, groups=3, max_n=128, tile_unit=32, x_width, slot, modes=None
):
    """A random program for an engine with the sparse path (``x_width`` its moving word, its
    sparse ``slot``, ``modes`` its PE's modes: None, every engine mode): ``groups`` sparse LS,
    each of a random sparse mode of the build, formats and ratio
    (2, 3, 4), K a multiple of 4, M random, with random valid tags (4 different positions per
    row group and column), followed by 1..3 sparse MMs; now and then a dense pair of a mode of
    the build, and
    illegal instructions (a sparse LS of a build's mode without sparse and a ratio of 5:
    SPARSE; an MM of another ratio: MODE_MISMATCH; K not a multiple of 4: K_RANGE)."""
    from ncrtl.model.modes import ENGINE_MODES, SPARSE_GROUP, SPARSE_RATIOS

    modes = tuple(ENGINE_MODES if modes is None else modes)
    sparse_modes = [md for md in modes if md.sparse]
    dense_only = [md for md in modes if not md.sparse]
    prog = Program(rows, cols, tile_unit=tile_unit, sparse=True, x_width=x_width, slot=slot)
    for _ in range(groups):
        if rng.random() < 0.2:  # a dense pair between sparse ones
            dense = modes[int(rng.integers(0, len(modes)))]
            k_ok = dense.k_step(tile_unit) <= rows and dense.m_multiple <= cols
            if k_ok:
                prog.steps += tile_steps(
                    rng, rows, cols, dense, False, (0, 0, 0, 0), 1, max_n, tile_unit
                )
        pe_mode = sparse_modes[int(rng.integers(0, len(sparse_modes)))]
        r = int(rng.choice(SPARSE_RATIOS))
        k = SPARSE_GROUP * int(rng.integers(1, rows // SPARSE_GROUP + 1))
        m = int(rng.integers(1, cols + 1))
        fs = int(rng.integers(0, len(pe_mode.formats_s)))
        fm = int(rng.integers(0, len(pe_mode.formats_m)))
        ls = Instruction(Op.LS, pe_mode.code, k=k, m=m, fmt_s=fs, fmt_m=fm, sparse=r)
        s_fmt, m_fmt = ls.formats
        tags = np.zeros((k, m), dtype=np.int64)
        for g in range(k // SPARSE_GROUP):
            for col in range(m):
                pos = rng.choice(SPARSE_GROUP * r, size=SPARSE_GROUP, replace=False)
                tags[SPARSE_GROUP * g : SPARSE_GROUP * (g + 1), col] = ((pos // r) << 2) | (pos % r)
        prog.steps.append(Step(ls, _values(rng, s_fmt, (k, m)), tags=tags))
        for _ in range(int(rng.integers(1, 4))):
            n = int(rng.integers(1, min(max_n, pe_mode.max_n) + 1))
            mm = replace(ls, op=Op.MM, n=n)
            prog.steps.append(Step(mm, _values(rng, m_fmt, (k, r, n))))
            if rng.random() < 0.3:
                bad = (
                    [
                        replace(ls, sparse=5),  # SPARSE: no such ratio
                        replace(mm, sparse=SPARSE_RATIOS[(SPARSE_RATIOS.index(r) + 1) % 3]),
                        replace(ls, k=k - 1 if k > 4 else 3),  # K_RANGE (not whole groups)
                    ]
                    + [replace(ls, mode=md.code, fmt_s=0, fmt_m=0) for md in dense_only[:1]]
                )
                prog.steps.append(Step(bad[int(rng.integers(0, len(bad)))]))
    return prog


def parallel_program(rng, rows, cols, op_name, *, pairs=2, max_n=16, tile_unit=32, finale=True):
    """A random program for an engine with parallel tiles: a tiling the mode accepts (its row
    or column tiles of one size, all positions, or the whole array now and then), per tile
    ``pairs`` LS each followed by 1..2 MMs, the tiles' sequences interleaved at random (each
    keeps its order), so that tiles stream side by side; with ``finale`` a whole-array pair at
    the end, which meets tiles still in flight now and then (``TILE_BUSY``: whether it does
    depends on timing, so a program run with stalls goes without it)."""
    pe_mode, transpose = operation(op_name)
    axes = [a for a, sizes in (("row", pe_mode.row_tiles), ("col", pe_mode.col_tiles)) if sizes]
    tiles = [(0, 0, 0, 0)]
    if axes:
        axis = axes[int(rng.integers(0, len(axes)))]
        size = int(rng.choice(pe_mode.row_tiles if axis == "row" else pe_mode.col_tiles))
        tiles = _tiling(axis, size * tile_unit // 32, rows, cols)
    seqs = [
        tile_steps(rng, rows, cols, pe_mode, transpose, t, pairs, max_n, tile_unit) for t in tiles
    ]
    prog = Program(rows, cols, tile_unit=tile_unit, parallel=True)
    prog.steps += interleave(rng, seqs)
    if finale:
        whole = (0, 0, 0, 0)
        prog.steps += tile_steps(rng, rows, cols, pe_mode, transpose, whole, 1, max_n, tile_unit)
    return prog


def _tiling(axis, size, rows, cols):
    """Every ``(tile_row, tile_rows, tile_col, tile_cols)`` of the row (``axis`` "row") or
    column tiles of ``size`` on a ``rows x cols`` array."""
    if axis == "row":
        return [(r, size, 0, 0) for r in range(0, rows - size + 1, size)]
    return [(0, 0, c, size) for c in range(0, cols - size + 1, size)]


def background_program(rng, rows, cols, ops, *, groups=4, max_n=16, tile_unit=32, tile_share=0.3):
    """A random program for an engine with the background transpose plane: ``groups`` LS +
    1..2 MM groups one after another, each of an operation drawn at random from ``ops`` (a
    sequence of operation names; one name: its mode's matmul and, where the mode can, its
    transpose; a transpose name: the transpose only), on one of the operation's tiles (a
    fraction ``tile_share`` of the groups) or the whole array, so that transposes meet matmuls
    and other transposes on both planes."""
    if isinstance(ops, str):
        pe_mode, transpose = operation(ops)
        kinds = [True] if transpose else ([False, True] if pe_mode.transposes else [False])
        kinds = [(pe_mode, t) for t in kinds]
    else:
        kinds = [operation(op) for op in ops]
    prog = Program(rows, cols, tile_unit=tile_unit, background=True)
    for _ in range(groups):
        pe_mode, tr = kinds[int(rng.integers(0, len(kinds)))]
        tiles = [(0, 0, 0, 0)] + [
            t
            for axis, sizes in (("row", pe_mode.row_tiles), ("col", pe_mode.col_tiles))
            for size in sizes
            for t in _tiling(axis, size * tile_unit // 32, rows, cols)
        ]
        tile = tiles[int(rng.integers(0, len(tiles)))] if rng.random() < tile_share else tiles[0]
        prog.steps += tile_steps(rng, rows, cols, pe_mode, tr, tile, 1, max_n, tile_unit)
    return prog


def interleave(rng, seqs):
    """The sequences merged at random, each keeping its order."""
    seqs = [list(q) for q in seqs]
    out = []
    while any(seqs):
        live = [q for q in seqs if q]
        out.append(live[int(rng.integers(0, len(live)))].pop(0))
    return out


def tile_steps(
    rng,
    rows,
    cols,
    pe_mode,
    transpose,
    tile,
    pairs,
    max_n,
    tile_unit,
    *,
    most_mms=2,
    mx_bf16=False,
    errors=False,
):
    """``pairs`` LS on ``tile`` (``(tile_row, tile_rows, tile_col, tile_cols)``) each followed
    by 1..``most_mms`` MMs of random shapes, as steps; with ``mx_bf16`` an MX MM has a BF16
    result (``bf16_out``, N up to 1024) half the time; with ``errors`` an illegal instruction
    follows an MM now and then."""
    tr, trs, tc, tcs = tile
    place = dict(tile_row=tr, tile_rows=trs, tile_col=tc, tile_cols=tcs)
    k_step, m_step = pe_mode.k_step(tile_unit), pe_mode.m_multiple
    steps = []
    for _ in range(pairs):
        k = k_step * int(rng.integers(1, (trs or rows) // k_step + 1))
        m = m_step * int(rng.integers(1, (tcs or cols) // m_step + 1))
        fs = int(rng.integers(0, len(pe_mode.formats_s)))
        fm = int(rng.integers(0, len(pe_mode.formats_m))) if len(pe_mode.formats_m) > 1 else 0
        if transpose:  # the selection matrix is in the stationary format
            fm = fs
        ls = Instruction(
            Op.LS, pe_mode.code, k=k, m=m, fmt_s=fs, fmt_m=fm, transpose=transpose, **place
        )
        s_fmt, m_fmt = ls.formats
        scale = (lambda x: random_scales(rng, (k, x))) if pe_mode.scale else (lambda x: None)  # noqa
        steps.append(Step(ls, _values(rng, s_fmt, tile_shape(pe_mode, k, m)), scale(m)))
        for _ in range(int(rng.integers(1, most_mms + 1))):
            bf16_out = mx_bf16 and pe_mode.max_n_bf16 > pe_mode.max_n and rng.random() < 0.5
            n = int(rng.integers(1, min(max_n, pe_mode.n_limit(bf16_out)) + 1))
            mm = replace(ls, op=Op.MM, n=n, bf16_out=bf16_out)
            if transpose:
                x = _selection(rng, k, n, m_fmt)
            else:
                x = _values(rng, m_fmt, tile_shape(pe_mode, k, n))
            steps.append(Step(mm, x, scale(n)))
            if errors and rng.random() < 0.3:
                bad = [
                    replace(mm, n=pe_mode.n_limit(bf16_out) + 1),  # N_RANGE
                    replace(ls, k=0),  # K_RANGE
                    replace(mm, tile_row=16, tile_rows=32, tile_col=0, tile_cols=0),  # bad tile
                ]
                steps.append(Step(bad[int(rng.integers(0, len(bad)))]))
    return steps


def golden_bits(ins, stationary, moving, rows, cols, tile_unit=32):
    """The golden ``[M, N]`` result bits (uint32) of MM ``ins`` on a ``rows x cols`` engine:
    ``stationary`` and ``moving`` are ``(encodings, MX scales or None)`` of its LS and of
    itself (:class:`Step` data)."""
    from ncrtl.model.tensor_engine.matmul import matmul, matmul_mx_rows
    from ncrtl.model.tensor_engine.sparse import matmul_sparse, pack_tags

    fs, fm = ins.formats
    a, b = _as_dtype(stationary[0], fs), _as_dtype(moving[0], fm)
    if ins.sparse:  # stationary[1]: the physical tags
        res = matmul_sparse(
            b,
            a,
            pack_tags(stationary[1]),
            ins.sparse,
            rows=rows,
            cols=cols,
            stationary_format=fs,
            moving_format=fm,
            tile_unit=tile_unit,
        )
        return np.asarray(res).view(np.uint32)
    whole = ins.whole(rows, cols)
    tiled = (whole.tile_rows, whole.tile_cols) != (rows, cols)
    place = dict(
        tile_position=(whole.tile_row, whole.tile_col) if tiled else None,
        tile_size=(whole.tile_rows, whole.tile_cols) if tiled else None,
        rows=rows,
        cols=cols,
        tile_unit=tile_unit,
    )
    if ins.pe_mode.scale:
        res = matmul_mx_rows(
            a,
            b,
            stationary[1],
            moving[1],
            psum_dtype="bf16" if ins.bf16_out else "fp32",
            **place,
        )
        return np.asarray(res).view(np.uint32)
    res = matmul(
        a,
        b,
        perf_mode=ins.pe_mode.perf_mode,
        is_transpose=ins.transpose,
        stationary_format=fs,
        moving_format=fm,
        **place,
    )
    res = np.asarray(res)
    return res.view(np.uint32) if res.dtype == np.float32 else res.astype(np.uint32)


def expected_outputs(prog):
    """Golden output vectors, in emission order: list of (mm step index, ``[M, N]`` bits)."""
    outs = []
    valid = prog.valid_steps()
    for idx, (s, ls) in enumerate(valid):
        if s.ins.op != Op.MM:
            continue
        st = next(x for x, _ in valid if x.ins is ls)
        side = st.tags if st.tags is not None else st.scale
        bits = golden_bits(
            s.ins, (st.data, side), (s.data, s.scale), prog.rows, prog.cols, prog.tile_unit
        )
        outs.append((idx, bits))
    return outs


def _as_dtype(codes, fmt):
    f = get_format(fmt)
    if f.name == "tf32":
        return np.asarray(codes, dtype=np.uint32).view(np.float32)
    return np.asarray(codes).astype(f.storage_dtype).view(f.dtype)
