"""``ncrtl sim matmul``: one matmul on the Tensor Engine RTL, with its cycle figures.

Builds the engine, runs one LoadStationary + MultiplyMoving through
``ncrtl.testbench.tensor_engine.test_sim`` (values checked against the golden, output cycles against
the timing model) and prints cycles, utilization and the equivalent TFLOPS at 2.4 GHz.
:func:`sim_matmul_mx` runs the MX chain: BF16 tiles through the RTL QuantizeMX, then the MX
matmul on the RTL engine, with the error of the result against float64.  Both take the user's
matrices (their encodings, :mod:`ncrtl.testbench.tensor_engine.operands`) instead of random ones
and write the RTL's result as float32 (:func:`save_result`).
"""

import json
import tempfile
import time
from pathlib import Path

import numpy as np

from ncrtl import blocks
from ncrtl.model.modes import operation
from ncrtl.testbench.conformance import print_time_split, run_block, streaming_rate

__all__ = [
    "sim_matmul",
    "sim_matmul_sparse",
    "sparse_operands",
    "dense_comparison",
    "engine_build",
    "run_matmul",
    "k_text",
    "result_values",
    "save_result",
    "sim_matmul_mx",
    "mx_sources",
    "mx_reference",
    "relative_errors",
    "CLOCK_HZ",
]

#: Tensor Engine clock of Trainium2 (documented 2.4 GHz).
CLOCK_HZ = 2.4e9


def k_text(pe_mode, k):
    """The contraction of a matmul of ``k`` partitions, as the figures print it: ``K=64`` for one
    product per PE step, ``K=64 (32 partitions x 2)`` for double_row (and x 4 for MX)."""
    p = pe_mode.products
    return f"K={k}" if p == 1 else f"K={k * p} ({k} partitions x {p})"


def result_values(bits, dtype, fmt_s=0):
    """The float32 values of a result as the RTL produced it: FP32 bits of a matmul, or the raw
    encodings of a transpose's stationary format (index ``fmt_s``) decoded exactly."""
    from ncrtl.model.fp import decode, get_format

    pe_mode, transpose = operation(dtype)
    b = np.asarray(bits)
    if not transpose:
        return b.astype(np.uint32).view(np.float32)
    f = get_format(pe_mode.formats_s[fmt_s])
    if f.container_bits == 32:
        return b.astype(np.uint32).view(np.float32)
    return decode(b.astype(f.storage_dtype), f).astype(np.float32)


def save_result(path, values):
    """Write ``values`` (float32) to the ``.npy`` file ``path``; print where."""
    from ncrtl.testbench.outputs import write_output

    arr = np.asarray(values, dtype=np.float32)

    def write(p):
        # Through a file object: np.save given a name would append ".npy" to any other suffix.
        with open(p, "wb") as f:
            np.save(f, arr, allow_pickle=False)

    write_output(path, "--out", write)
    print(f"  result written to {path} (float32 {list(np.shape(values))})")


def engine_build(rows, cols, dtype, *, sparse=False, pe_modes=None):
    """``(block, params, player ports, why)`` of the engine ``ncrtl sim matmul`` builds for an
    operation ``dtype`` (what :func:`ncrtl.testbench.conformance.find_build` looks up);
    ``sparse``: the engine with the sparse path (``sparse=1``, its wider moving words);
    ``pe_modes``: the modes its PE is built for, None for the narrowest family serving
    ``dtype`` (:meth:`ncrtl.blocks.Block.resolve_run`; ``why`` says which and why, None when
    given).  A ``BlockError`` names an engine that cannot be built so (rows not a multiple of
    4, a ``pe_modes`` without ``dtype``)."""
    from ncrtl.hdl.tensor_engine.pe import LANE_WIDTH, moving_width
    from ncrtl.model.modes import pe_modes as modes_of
    from ncrtl.testbench.tensor_engine.test_tensor_engine import player_ports

    block = blocks.get("pe_array")
    spec = {"rows": str(rows), "cols": str(cols), "mode": dtype}
    if sparse:
        spec["sparse"] = "1"
    if pe_modes is not None:
        spec["pe_modes"] = pe_modes
    params, why = block.resolve_run(spec)
    x_width = moving_width(modes_of(params["pe_modes"]), True) if sparse else LANE_WIDTH
    return block, params, player_ports(rows, cols, params["tile_unit"], x_width), why


def run_matmul(
    *,
    rows,
    cols,
    dtype,
    k,
    m,
    n,
    seed,
    waves=False,
    player=True,
    data=None,
    formats=(0, 0),
    special=False,
    sparse=False,
    pe_modes=None,
    bands=None,
    repeat=1,
    progress=True,
):
    """``repeat`` LS + MM pairs of ``dtype`` (random data in ``formats``, with special values
    when ``special``, or one pair on the arrays ``data`` as ``test_sim`` reads them;
    ``sparse``: on the engine with the sparse path, ``data`` a sparse matmul's), checked
    against the golden and the timing model: ``(BlockResult, the RTL's [M, N] result bits of
    the last pair or None)``.

    ``bands``: a :class:`~ncrtl.testbench.tensor_engine.loop_run.BandChoice`, a number of column
    bands (1: one model) or None for :func:`~ncrtl.testbench.tensor_engine.loop_run.band_choice`'s
    default (bands on every core at full size).  On bands the program plays from the files of
    the stream players in the band loop (:func:`~ncrtl.testbench.tensor_engine.loop_run.
    run_on_bands`); on one model ``test_sim`` runs it in the cocotb testbench (with the Verilog
    stream players, ``player``, or the Python drivers)."""
    from ncrtl.testbench.tensor_engine.loop_run import BandChoice, band_choice, run_on_bands

    block, params, ports, _ = engine_build(rows, cols, dtype, sparse=sparse, pe_modes=pe_modes)
    choice = bands
    if not isinstance(choice, BandChoice):
        choice = band_choice(params, bands=bands, waves=waves, player=player)
    if choice.bands > 1:
        from ncrtl.model.modes import pe_modes as modes_of
        from ncrtl.testbench.tensor_engine.test_sim import matmul_program

        t0 = time.perf_counter()
        prog = matmul_program(
            rows,
            cols,
            dtype,
            k,
            m,
            n,
            seed,
            data,
            repeat=repeat,
            formats=formats,
            special=special,
            engine_modes=modes_of(params["pe_modes"]) if sparse else None,
        )
        stimulus = time.perf_counter() - t0
        res, got = run_on_bands(block, params, prog, choice, seed=seed, progress=progress)
        res.steps["stimulus_s"] = stimulus
        res.seconds += stimulus
        rtl = None if got is None else np.asarray(got[:, :m]).T.astype(np.uint32)
        return res, rtl
    with tempfile.TemporaryDirectory() as tmp:
        job = {"k": k, "m": m, "n": n, "out": str(Path(tmp) / "out.npy"), "repeat": repeat}
        job.update(fmt_s=int(formats[0]), fmt_m=int(formats[1]), special=bool(special))
        if data is not None:
            job["data"] = str(Path(tmp) / "data.npz")
            np.savez(job["data"], **data)
        res = run_block(
            block,
            params,
            count=n,
            seed=seed,
            stall=0.0,
            waves=True if waves else None,
            testbench="ncrtl.testbench.tensor_engine.test_sim",
            extra_env={"NCRTL_MATMUL": json.dumps(job)},
            player=ports if player else None,
            progress=progress,
        )
        out = Path(job["out"])
        rtl = np.load(out) if out.exists() else None
    return res, rtl


def _print_figures(res, *, dtype, rows, cols, k, m, n, ratio=1):
    """Cycles, MACs, utilization, TFLOPS, simulation speed, the time split and the
    scoreboards of a :func:`_run_matmul` result; a sparse matmul of compression ratio
    ``ratio`` counts the dense-equivalent MACs of its ``K ratio`` rows (utilization over the
    dense peak, as ``ncrtl timing matmul --sparse`` does)."""
    pe_mode, transpose = operation(dtype)
    c = res.counters
    cycles = c["last_out"] - c["first_instr"] + 1
    products = pe_mode.products
    macs = 0 if transpose else k * m * n * products * ratio
    peak = pe_mode.macs_per_cycle(rows, cols)
    print(f"  cycles (first instruction to last output vector): {cycles}")
    print(
        f"  first output vector after {c['first_out'] - c['first_instr']} cycles; "
        f"moving stream {n * pe_mode.interval(transpose)} cycles"
    )
    if macs:
        dense = "dense-equivalent " if ratio > 1 else ""
        print(
            f"  {dense}MACs {macs}: {macs / cycles:.1f} per cycle, utilization "
            f"{macs / (cycles * rows * cols * products):.3f} of {rows * cols * products} "
            f"{'dense ' if dense else ''}MACs/cycle"
        )
        tflops = 2 * macs / (cycles / CLOCK_HZ) / 1e12
        top = 2 * peak * CLOCK_HZ / 1e12
        if ratio > 1:
            peaks = (
                f"{pattern(ratio)} peak {ratio * top:.1f} dense-equivalent TFLOPS in steady state, "
                f"dense {top:.1f}"
            )
        else:
            peaks = f"mode peak {top:.1f} TFLOPS in steady state"
        print(
            f"  {dense or 'equivalent '}{tflops:.2f} TFLOPS at {CLOCK_HZ / 1e9:.1f} GHz ({peaks})"
        )
    if c.get("run_us"):
        stream = streaming_rate(res)
        sim_s = res.steps.get("simulate") or res.steps.get("loop_s") or 0.0
        print(
            f"  simulation speed {stream:.1f} cycles/s streaming ({c['run_us'] / 1e6:.1f} s), "
            f"{c['cycles'] / res.seconds:.1f} cycles/s end to end ({res.seconds:.1f} s; "
            f"the simulator process {sim_s:.1f} s)"
        )
    print_time_split(res)
    for u in res.units:
        print(f"  {u['name']}: {u['vectors']} compared, {u['mismatches']} mismatches")


def sim_matmul(
    *,
    rows,
    cols,
    dtype,
    k,
    m,
    n,
    seed=1,
    waves=False,
    player=True,
    formats=(0, 0),
    special=False,
    data=None,
    source="",
    out=None,
    pe_modes=None,
    bands=None,
):
    """Run the matmul and print its figures; return the exit status (0 = matched).

    ``player``: the stimulus plays from Verilog stream players (:mod:`ncrtl.testbench.player`),
    else from the Python drivers.  ``formats``: the stationary and moving format indices of the
    mode; ``special``: random data with signed zeros, subnormals, infinities and NaNs; ``data``:
    ``{"stationary": codes, "moving": codes}`` (encodings in :func:`tile_shape` of the formats)
    instead of random data, ``source`` naming it in the header; ``out``: write the RTL's result
    there as float32 (:func:`save_result`)."""
    pe_mode, transpose = operation(dtype)
    if data is not None:
        data = dict(data, fmt_s=int(formats[0]), fmt_m=int(formats[1]))
    fs, fm = pe_mode.formats_s[formats[0]], pe_mode.formats_m[formats[1]]
    what = source or f"random {'special' if special else 'normal'} values"
    print(
        f"{'transpose' if transpose else 'matmul'} {dtype} {k_text(pe_mode, k)} M={m} N={n} on a "
        f"{rows}x{cols} array, {fs} x {fm}, {what}",
        flush=True,
    )
    res, rtl = run_matmul(
        rows=rows,
        cols=cols,
        dtype=dtype,
        k=k,
        m=m,
        n=n,
        seed=seed,
        waves=waves,
        player=player,
        data=data,
        formats=formats,
        special=special,
        pe_modes=pe_modes,
        bands=bands,
    )
    if not res.counters.get("last_out"):
        print(f"simulation failed: {res.message}")
        return 1
    _print_figures(res, dtype=dtype, rows=rows, cols=cols, k=k, m=m, n=n)
    print(
        f"  result {'MATCHES' if res.passed else 'DOES NOT MATCH'} the golden model and the "
        f"timing model"
    )
    if out is not None and rtl is not None:
        save_result(out, result_values(rtl, dtype, formats[0]))
    if not res.passed:
        print(res.message)
    return 0 if res.passed else 1


def pattern(ratio):
    """The M:N pattern of a compression ratio: ``4:16`` for 4."""
    from ncrtl.model.modes import SPARSE_GROUP

    return f"{SPARSE_GROUP}:{SPARSE_GROUP * ratio}"


def sparse_operands(rng, formats, k, m, n, ratio, special=False):
    """Random operands of a sparse matmul: a dense stationary ``[K R, M]`` of the stationary
    format with 4 kept positions at random in every group of ``4 R`` rows of a column (zeros
    elsewhere) compressed by ``compress`` with that mask, and a dense moving ``[K R, N]``
    reshaped to ``[K, R, N]``: ``{"values": codes [K, M], "tag": packed uint16 [K, ceil(M /
    4)], "moving": codes [K, R, N]}``.  Values as ``ncrtl sim matmul`` draws them
    (``special``: signed zeros, subnormals, infinities and NaNs mixed in, the non-finite ones
    sized to the dense contraction)."""
    from ncrtl.model.fp import from_bits, get_format
    from ncrtl.model.modes import SPARSE_GROUP
    from ncrtl.model.tensor_engine.sparse import compress
    from ncrtl.testbench.tensor_engine.program import _values, special_values

    fs, fm = formats
    span = SPARSE_GROUP * ratio
    if special:
        nonfinite = 0.1 / (k * ratio)

        def values(fmt, shape):
            return special_values(rng, fmt, shape, 0.1, nonfinite)
    else:

        def values(fmt, shape):
            return _values(rng, fmt, shape, special=0)

    dense = values(fs, (k * ratio, m))
    # SPARSE_GROUP positions of every group and column: the first of a random order of each
    pick = rng.random((k // SPARSE_GROUP, span, m)).argsort(axis=1) < SPARSE_GROUP
    mask = pick.reshape(k * ratio, m)
    dense = np.where(mask, dense, 0).astype(dense.dtype)
    kept, tag = compress(from_bits(dense, fs), ratio, mask)
    moving = values(fm, (k * ratio, n)).reshape(k, ratio, n)
    return {"values": kept.view(get_format(fs).storage_dtype), "tag": tag, "moving": moving}


def dense_comparison(values, tag, moving, ratio, formats, bits):
    """The result ``bits`` (FP32 ``[M, N]``) of a sparse matmul against the dense golden on the
    decompressed stationary (``K R`` rows; its chain without the 255-row limit of the
    instruction fields where ``K R`` exceeds it), each differing output with the contract's
    reason (docs/tensor_engine.md, "Sparse matmul"): ``{"outputs", "differ", "nonfinite" (a
    non-finite moving element meets a dropped zero: NaN in the dense chain only), "zero_sign"
    (both zero), "order" (the column's tags do not ascend within a group: another summation
    order), "other"}``, a differing output counted under its first reason."""
    from ncrtl.model.fp import decode, from_bits
    from ncrtl.model.modes import SPARSE_GROUP
    from ncrtl.model.tensor_engine.isa import MAX_ARRAY
    from ncrtl.model.tensor_engine.matmul import _chain_float64, matmul
    from ncrtl.model.tensor_engine.sparse import decompress, expand_tags

    fs, fm = formats
    k, m = values.shape
    n = moving.shape[2]
    dense = from_bits(decompress(values, tag, ratio), fs)
    x = from_bits(moving.reshape(k * ratio, n), fm)
    if k * ratio <= MAX_ARRAY:
        want = matmul(
            dense, x, rows=MAX_ARRAY, cols=MAX_ARRAY, stationary_format=fs, moving_format=fm
        )
    else:  # what matmul computes for the sparse modes (short products), over more rows
        want = _chain_float64(decode(dense, fs), decode(x, fm))
    got, want = np.asarray(bits, np.uint32), np.asarray(want).view(np.uint32)
    differ = got != want
    pos = expand_tags(tag, ratio, m)  # [K, M] positions within the groups
    kept = np.zeros((k * ratio, m), dtype=bool)
    base = (np.arange(k) // SPARSE_GROUP * SPARSE_GROUP * ratio)[:, None]
    np.put_along_axis(kept, base + pos, True, axis=0)
    bad_x = ~np.isfinite(decode(x, fm))
    nonfinite = (~kept).T.astype(np.int64) @ bad_x.astype(np.int64) > 0
    zero = ((got & 0x7FFFFFFF) == 0) & ((want & 0x7FFFFFFF) == 0)
    groups = pos.reshape(k // SPARSE_GROUP, SPARSE_GROUP, m)
    order = ~(np.diff(groups, axis=1) > 0).all(axis=(0, 1))[:, None]
    out = {"outputs": int(got.size), "differ": int(differ.sum())}
    left = differ
    for name, why in (("nonfinite", nonfinite), ("zero_sign", zero), ("order", order)):
        hit = left & why
        out[name] = int(hit.sum())
        left = left & ~hit
    out["other"] = int(left.sum())
    return out


def _dense_line(cmp, k_dense):
    """The printed line of :func:`dense_comparison`."""
    head = f"  dense golden on the decompressed stationary (K={k_dense} dense rows): "
    if not cmp["differ"]:
        return head + f"all {cmp['outputs']} outputs agree bit for bit"
    reasons = {
        "nonfinite": "a non-finite moving element at a dropped zero (0 x Inf or NaN is NaN in "
        "the dense chain only)",
        "zero_sign": "the sign of a zero (a -0 psum turned +0 by a dropped +0 x x step)",
        "order": "tags that do not ascend within a group (the chains add in another order)",
        "other": "none of the contract's exceptions",
    }
    why = "; ".join(f"{cmp[key]} {text}" for key, text in reasons.items() if cmp[key])
    return head + f"{cmp['differ']} of {cmp['outputs']} outputs differ: {why}"


def sim_matmul_sparse(
    *,
    rows,
    cols,
    dtype,
    ratio,
    k,
    m,
    n,
    seed=1,
    waves=False,
    formats=(0, 0),
    special=False,
    data=None,
    source="",
    out=None,
    pe_modes=None,
    bands=None,
):
    """One sparse matmul (``nc_matmul_sparse``, compression ratio ``ratio``) on the RTL engine
    built with the sparse path; print its figures (dense-equivalent MACs and TFLOPS), whether
    the result matched the golden ``matmul_sparse`` and the timing model, and how it compares
    with the dense golden on the decompressed stationary.  ``data``: ``{"values": compressed
    codes [K, M], "tag": packed uint16 tags, "moving": codes [K, R, N]}``, named by ``source``,
    or None for :func:`sparse_operands`; ``out``: write the RTL's result there as float32.
    Returns the exit status (0: the result matched and the dense golden differs only where the
    contract allows)."""
    from ncrtl.model.modes import SPARSE_GROUP
    from ncrtl.model.tensor_engine.sparse import unpack_tags

    pe_mode, _ = operation(dtype)
    fs, fm = pe_mode.formats_s[formats[0]], pe_mode.formats_m[formats[1]]
    if data is None:
        data = sparse_operands(np.random.default_rng(seed), (fs, fm), k, m, n, ratio, special)
        what = (
            f"random {'special' if special else 'normal'} values, {SPARSE_GROUP} of every "
            f"{SPARSE_GROUP * ratio} stationary rows kept at random"
        )
    else:
        what = source
    print(
        f"nc_matmul_sparse {pattern(ratio)} {dtype} K={k} (logical K={k * ratio}) M={m} N={n} "
        f"on a {rows}x{cols} array, {fs} x {fm}, {what}",
        flush=True,
    )
    codes = {
        "stationary": data["values"],
        "tags": unpack_tags(data["tag"], m),
        "moving": data["moving"],
        "sparse": ratio,
        "fmt_s": int(formats[0]),
        "fmt_m": int(formats[1]),
    }
    res, rtl = run_matmul(
        rows=rows,
        cols=cols,
        dtype=dtype,
        k=k,
        m=m,
        n=n,
        seed=seed,
        waves=waves,
        player=True,
        data=codes,
        sparse=True,
        pe_modes=pe_modes,
        bands=bands,
    )
    if rtl is None or not res.counters.get("last_out"):
        print(f"simulation failed: {res.message}")
        return 1
    _print_figures(res, dtype=dtype, rows=rows, cols=cols, k=k, m=m, n=n, ratio=ratio)
    print(
        f"  result {'MATCHES' if res.passed else 'DOES NOT MATCH'} the golden model "
        f"(matmul_sparse) and the timing model"
    )
    cmp = dense_comparison(data["values"], data["tag"], data["moving"], ratio, (fs, fm), rtl)
    print(_dense_line(cmp, k * ratio))
    if out is not None:
        save_result(out, result_values(rtl, dtype))
    if not res.passed:
        print(res.message)
    return 0 if res.passed and not cmp["other"] else 1


def mx_sources(rng, k, m, n):
    """Random BF16 SBUF tiles of an MX matmul: stationary ``[K, 4M]`` and moving ``[K, 4N]``,
    standard normal values rounded to BF16 (element ``[p, 4f + j]`` becomes packed element
    ``(p, f, j)``: contraction index ``j * K + p``)."""
    import ml_dtypes

    return (
        rng.standard_normal((k, 4 * m)).astype(ml_dtypes.bfloat16),
        rng.standard_normal((k, 4 * n)).astype(ml_dtypes.bfloat16),
    )


def mx_reference(stationary_src, moving_src):
    """The float64 matmul of the BF16 sources the MX matmul approximates: ``[M, N]``, the sum over
    partitions ``p`` and packed index ``j`` of ``S[p, 4m + j] * X[p, 4n + j]``."""
    k = stationary_src.shape[0]
    s = np.asarray(stationary_src, np.float64).reshape(k, -1, 4)
    x = np.asarray(moving_src, np.float64).reshape(k, -1, 4)
    return np.einsum("pmj,pnj->mn", s, x)


def relative_errors(result, reference):
    """``(Frobenius-norm relative error, largest error / largest reference magnitude)`` of a
    float result against a float64 reference (NaN if the result holds NaN or Inf)."""
    r = np.asarray(result, np.float64)
    ref = np.asarray(reference, np.float64)
    if not np.isfinite(r).all():
        return float("nan"), float("nan")
    scale = np.linalg.norm(ref) or 1.0
    top = np.abs(ref).max() or 1.0
    return float(np.linalg.norm(r - ref) / scale), float(np.abs(r - ref).max() / top)


def sim_matmul_mx(
    *,
    rows,
    cols,
    dtype,
    moving_dtype=None,
    k,
    m,
    n,
    scale_rule="trn3",
    seed=1,
    waves=False,
    sources=None,
    source="",
    special=False,
    out=None,
    pe_modes=None,
    bands=None,
):
    """The MX chain on the RTL: two BF16 tiles quantized by the RTL QuantizeMX, the MX matmul of
    the RTL's codes and scales on the RTL Tensor Engine; both compared bit for bit with the
    golden chain (``quantize_mx`` then ``matmul_mx``), and the result's error against a float64
    matmul of the BF16 inputs printed.  The tiles are ``sources`` (``(stationary [K, 4M],
    moving [K, 4N])`` bfloat16, named by ``source``) or random: BF16 ~ N(0, 1), or with
    ``special`` values around 1 with signed zeros, subnormals, infinities and NaNs.  ``out``:
    write the RTL's result there as float32.  Returns the exit status (0 = matched)."""
    import ml_dtypes

    from ncrtl.model.modes import MX_DTYPES, MX_FORMATS
    from ncrtl.model.tensor_engine.matmul import matmul_mx, mx_row_scales
    from ncrtl.model.vector_engine import quantize_mx
    from ncrtl.testbench.tensor_engine.program import special_values
    from ncrtl.testbench.vector_engine.simulate import quantize_tiles

    moving_dtype = moving_dtype or dtype
    fs, fm = MX_DTYPES[dtype], MX_DTYPES[moving_dtype]
    rng = np.random.default_rng(seed)
    if sources is not None:
        s_src, x_src = sources
        what = source
    elif special:
        nonfinite = 0.1 / (4 * k)
        s_src, x_src = (
            special_values(rng, "bf16", (k, 4 * x), 0.1, nonfinite).view(ml_dtypes.bfloat16)
            for x in (m, n)
        )
        what = "random BF16 special values"
    else:
        s_src, x_src = mx_sources(rng, k, m, n)
        what = "random BF16 ~ N(0, 1)"
    print(
        f"MX matmul {dtype} x {moving_dtype} K={4 * k} ({k} partitions x 4) M={m} N={n} on a "
        f"{rows}x{cols} array, {what} quantized by the RTL QuantizeMX (scale rule "
        f"{scale_rule})",
        flush=True,
    )
    quantized, qres = quantize_tiles(
        {"stationary": s_src, "moving": x_src},
        {"stationary": fs, "moving": fm},
        scale_rule=scale_rule,
        seed=seed,
    )
    for u in qres.units:
        print(f"  {u['name']}: {u['vectors']} compared, {u['mismatches']} mismatches")
    if not qres.passed:
        print(f"  QuantizeMX DOES NOT MATCH the golden model: {qres.message}")
        return 1
    (s_codes, s_scales), (x_codes, x_scales) = quantized["stationary"], quantized["moving"]

    data = dict(
        stationary=s_codes,
        moving=x_codes,
        stationary_scale=mx_row_scales(s_scales, k),
        moving_scale=mx_row_scales(x_scales, k),
        fmt_s=MX_FORMATS.index(fs),
        fmt_m=MX_FORMATS.index(fm),
    )
    res, rtl = run_matmul(
        rows=rows,
        cols=cols,
        dtype="mx",
        k=k,
        m=m,
        n=n,
        seed=seed,
        waves=waves,
        player=True,
        data=data,
        pe_modes=pe_modes,
        bands=bands,
    )
    if rtl is None or not res.counters.get("last_out"):
        print(f"simulation failed: {res.message}")
        return 1
    # The golden chain, on its own: the golden QuantizeMX, then the golden MX matmul.
    gs, gss = quantize_mx(s_src, fs, scale_rule=scale_rule)
    gx, gxs = quantize_mx(x_src, fm, scale_rule=scale_rule)
    golden = matmul_mx(gs, gx, gss, gxs, rows=rows, cols=cols)
    chain = int((rtl != golden.view(np.uint32)).sum())
    _print_figures(res, dtype="mx", rows=rows, cols=cols, k=k, m=m, n=n)
    print(f"  RTL result vs the golden chain (quantize_mx, matmul_mx): {chain} mismatching words")
    fro, peak = relative_errors(rtl.view(np.float32), mx_reference(s_src, x_src))
    print(
        f"  relative error against the float64 matmul of the BF16 inputs: {fro:.3e} "
        f"(Frobenius norm), {peak:.3e} (largest error / largest magnitude)"
    )
    ok = res.passed and chain == 0
    print(f"  result {'MATCHES' if ok else 'DOES NOT MATCH'} the golden chain and the timing model")
    if out is not None:
        save_result(out, rtl.view(np.float32))
    if not res.passed:
        print(res.message)
    return 0 if ok else 1
