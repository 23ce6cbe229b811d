"""Tensor Engine programs: instruction sequences with their data, and their expected results.

A :class:`Program` is a list of :class:`Step` (an instruction plus the stationary or moving tile it
streams).  :func:`random_program` draws one for a mode; :meth:`Program.expected` runs the golden
model (values) and the timing model (cycles) on it.  The cocotb testbench
(``testbench.tensor_engine.test_tensor_engine``) streams a program into the RTL and compares.
"""

from dataclasses import dataclass, field

import numpy as np

from model.fp import encode, get_format
from model.tensor_engine import isa
from model.tensor_engine.isa import Instruction, Mode, Op

__all__ = ["Step", "Program", "random_program", "MODES", "lane_words"]

#: Conformance modes: name -> (Mode, transpose).
MODES = {
    "fp32": (Mode.FP32, False), "tf32": (Mode.TF32, False), "bf16": (Mode.BF16, False),
    "fp16": (Mode.FP16, False), "fp8": (Mode.FP8, False), "double_row": (Mode.DOUBLE_ROW, False),
    "transpose_bf16": (Mode.BF16, True), "transpose_fp8": (Mode.FP8, True),
    "transpose_fp32": (Mode.FP32, True),
}


@dataclass
class Step:
    """One instruction and its data (encodings, uint arrays): stationary ``[K, M]`` (or
    ``[K, 2, M]``) for an LS, moving ``[K, N]`` (or ``[K, 2, N]``) for an MM."""

    ins: Instruction
    data: np.ndarray = None


@dataclass
class Program:
    rows: int
    cols: int
    steps: list = field(default_factory=list)

    def instructions(self):
        return [s.ins for s in self.steps]

    def valid_steps(self):
        """Steps the engine accepts (``isa.check`` passes), with their LS for MMs."""
        out, last_ls = [], None
        for s in self.steps:
            err = isa.check(s.ins, self.rows, self.cols, last_ls)
            if err is None:
                if s.ins.op == Op.LS:
                    last_ls = s.ins
                out.append((s, last_ls))
        return out


def lane_words(tile, fmt, double_row):
    """Beat lane words of a tile of encodings: ``[K, X]`` -> one int per (x, k) lane, as
    ``[X, K]`` object array (double_row packs value j in bits [8j, 8j+8))."""
    t = np.asarray(tile).astype(np.int64)
    if double_row:
        t = t[:, 0, :] | (t[:, 1, :] << 8)
    return t.T


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


def _selection(rng, k, n, fmt):
    """A 0/1 selection matrix [K, N]: each column one 1 (or none), as encodings of ``fmt``."""
    one = int(encode(np.array([1.0]), fmt)[0])
    sel = np.zeros((k, n), dtype=np.int64)
    rows = rng.integers(0, k, n)
    has = rng.random(n) < 0.95
    sel[rows[has], np.nonzero(has)[0]] = one
    return sel.astype(get_format(fmt).storage_dtype)


def _random_tile(rng, rows, cols):
    """``(tile_row, tile_rows, tile_col, tile_cols)`` of a random row or column tile of the
    hardware sizes (32 or 64), or the whole array; tiles need a 64 x 64 array or larger."""
    if rows < 64 or cols < 64 or rng.random() < 0.4:
        return 0, 0, 0, 0
    size = int(rng.choice([32, 64]))
    if rng.random() < 0.5:
        return size * int(rng.integers(0, rows // size)), size, 0, 0
    return 0, 0, size * int(rng.integers(0, cols // size)), size


def random_program(rng, rows, cols, mode_name, *, groups=3, max_n=128, errors=True):
    """A random program of ``groups`` LS + 1..3 MM groups in one mode, with illegal
    instructions mixed in when ``errors``; on arrays of 64 x 64 and more, most groups run on a
    random row or column tile (not double_row, which cannot be tiled)."""
    mode, transpose = MODES[mode_name]
    prog = Program(rows, cols)
    names = isa.MODE_FORMATS[mode]
    for g in range(groups):
        tr, trs, tc, tcs = (0, 0, 0, 0) if mode == Mode.DOUBLE_ROW else _random_tile(rng, rows,
                                                                                    cols)
        tile = dict(tile_row=tr, tile_rows=trs, tile_col=tc, tile_cols=tcs)
        k = int(rng.integers(1, (trs or rows) + 1))
        m = int(rng.integers(1, (tcs or cols) + 1))
        fs = int(rng.integers(0, len(names)))
        fm = int(rng.integers(0, len(names))) if mode in (Mode.FP8, Mode.DOUBLE_ROW) else fs
        if transpose:
            fm = fs
        ls = Instruction(Op.LS, mode, k=k, m=m, fmt_s=fs, fmt_m=fm, transpose=transpose, **tile)
        dr = mode == Mode.DOUBLE_ROW
        s_shape = (k, 2, m) if dr else (k, m)
        prog.steps.append(Step(ls, _values(rng, names[fs], s_shape)))
        for _ in range(int(rng.integers(1, 4))):
            n = int(rng.integers(1, max_n + 1))
            mm = Instruction(Op.MM, mode, k=k, m=m, n=n, fmt_s=fs, fmt_m=fm, transpose=transpose,
                             **tile)
            if transpose:
                x = _selection(rng, k, n, names[fm])
            else:
                x = _values(rng, names[fm], (k, 2, n) if dr else (k, n))
            prog.steps.append(Step(mm, x))
            if errors and rng.random() < 0.3:
                bad = [Instruction(Op.MM, mode, k=k, m=m, n=isa.MAX_N + 1, fmt_s=fs, fmt_m=fm,
                                   transpose=transpose),
                       Instruction(Op.LS, mode, k=0, m=m, fmt_s=fs, fmt_m=fm),
                       Instruction(Op.MM, mode, k=k, m=m, n=n, fmt_s=fs, fmt_m=fm,
                                   transpose=transpose, tile_row=16, tile_rows=32)]
                prog.steps.append(Step(bad[int(rng.integers(0, len(bad)))]))
    return prog


def expected_outputs(prog):
    """Golden output vectors, in emission order: list of (mm step index, ``[M, N]`` bits)."""
    from model.tensor_engine.matmul import matmul
    outs = []
    valid = prog.valid_steps()
    for idx, (s, ls) in enumerate(valid):
        if s.ins.op != Op.MM:
            continue
        st = next(x for x, _ in valid if x.ins is ls)
        fs, fm = s.ins.formats
        dr = s.ins.mode == Mode.DOUBLE_ROW
        a = _as_dtype(st.data, fs)
        b = _as_dtype(s.data, fm)
        res = matmul(a, b, perf_mode="double_row" if dr else None, is_transpose=s.ins.transpose,
                     rows=prog.rows, cols=prog.cols,
                     stationary_format=fs, moving_format=fm)
        res = np.asarray(res)
        bits = res.view(np.uint32) if res.dtype == np.float32 else res.astype(np.uint32)
        outs.append((idx, bits))
    return outs


def _as_dtype(codes, fmt):
    f = get_format(fmt)
    if f.name == "tf32":
        return np.asarray(codes, dtype=np.uint32).view(np.float32)
    return np.asarray(codes).astype(f.storage_dtype).view(f.dtype)

