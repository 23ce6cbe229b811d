"""``ncrtl sim matmul``: a matmul through the RTL engine (or the matmul path into PSUM), on
random data or the user's matrices, checked against the golden and the timing model."""

from .. import blocks
from ..model.modes import MX_DTYPES, MX_FORMATS, SPARSE_GROUP, SPARSE_MODES, operation
from ..model.tensor_engine import isa
from ..model.tensor_engine.isa import Instruction, Mode, Op
from ..testbench.outputs import check_output
from .common import (
    SPARSE_PATTERNS,
    UsageError,
    _check_seed,
    _dtypes_epilog,
    _seed_arg,
    load_npy,
    say_pe_build,
    sparse_ratio,
)

#: Engines of at least this many PEs build for minutes: ``ncrtl sim`` says so before it starts
#: an uncached build, with the figures of :data:`BIG_BUILD`.
BIG_ENGINE = 64 * 64


#: What an uncached 128 x 128 build took (docs/tensor_engine.md), by how the run steps it.
BIG_BUILD = {
    "one model": (
        "the 128 x 128 all-mode engine took 4 to 5 minutes (Verilog generation 20 s, Verilator "
        "build 3.5 to 5 min) and up to 11 GiB of memory on a 2-core machine, the bf16 family "
        "1.5 to 2 minutes and 3.1 GiB"
    ),
    "bands": (
        "the 128 x 128 engine as column bands took 1.5 to 2 minutes and 1.5 GiB (bf16 family) "
        "to 2 to 2.5 minutes (all modes) on a 2-core machine"
    ),
}


def _size(args, name, block):
    """``--rows`` / ``--cols`` of ``ncrtl sim``: the block parameter's range, in the flag's
    words."""
    value = getattr(args, name)
    param = next(q for q in block.params if q.name == name)
    if not param.minimum <= value <= param.maximum:
        raise UsageError(
            f"--{name} {value} must be in {param.minimum}..{param.maximum} (the sizes of the RTL "
            f"{'engine' if block.name == 'pe_array' else 'matmul path'})"
        )
    return value


def _given(value, default):
    """A size flag's value, or its default when the flag was not given (0 is a value)."""
    return default if value is None else value


def _own_data(args):
    """``(stationary array, moving array)`` of ``--stationary`` / ``--moving``, or None."""
    if (args.stationary is None) != (args.moving is None):
        raise UsageError("--stationary and --moving go together: give both matrices, or neither")
    if args.stationary is None:
        return None
    return load_npy(args.stationary, "--stationary"), load_npy(args.moving, "--moving")


def _source(args):
    return f"--stationary {args.stationary} x --moving {args.moving}"


def _formats(args, pe_mode, transpose):
    """The stationary and moving format indices of ``--format`` / ``--moving-format``."""
    fs = args.format or pe_mode.formats_s[0]
    if fs not in pe_mode.formats_s:
        raise UsageError(
            f"--format {fs!r} is not a stationary format of {args.dtype}; allowed: "
            f"{', '.join(pe_mode.formats_s)}"
        )
    if transpose:
        # A transpose moves the stationary encodings; its selection matrix is in their format.
        if args.moving_format not in (None, fs):
            raise UsageError(
                f"--moving-format does not apply to a transpose: its selection matrix is in the "
                f"stationary format ({fs})"
            )
        return pe_mode.formats_s.index(fs), pe_mode.formats_s.index(fs)
    fm = args.moving_format or (fs if fs in pe_mode.formats_m else pe_mode.formats_m[0])
    if fm not in pe_mode.formats_m:
        raise UsageError(
            f"--moving-format {fm!r} is not a moving format of {args.dtype}; allowed: "
            f"{', '.join(pe_mode.formats_m)}"
        )
    return pe_mode.formats_s.index(fs), pe_mode.formats_m.index(fm)


def _shapes(args, own, pe_mode):
    """``(K, M, N)`` of ``--stationary`` / ``--moving``, checked against any of ``--k``,
    ``--m``, ``--n`` also given."""
    s, x = own
    p = pe_mode.products
    if p > 1:
        want = f"[K, {p}, M] and [K, {p}, N] ({args.dtype}: {p} elements per partition)"
        ok = s.ndim == 3 and x.ndim == 3 and s.shape[1] == p and x.shape[1] == p
    else:
        want = "[K, M] and [K, N]"
        ok = s.ndim == 2 and x.ndim == 2
    if not ok:
        raise UsageError(
            f"{_source(args)}: shapes {list(s.shape)} and {list(x.shape)}; {args.dtype} takes "
            f"{want}"
        )
    if s.shape[0] != x.shape[0]:
        raise UsageError(
            f"{_source(args)}: K differs ({s.shape[0]} and {x.shape[0]} rows); both matrices "
            f"have the contraction's K rows"
        )
    k, m, n = s.shape[0], s.shape[-1], x.shape[-1]
    _match_sizes(args, k, m, n)
    return k, m, n


def _match_sizes(args, k, m, n):
    """Any of ``--k``, ``--m``, ``--n`` given with the matrices must equal their sizes."""
    for name, given, got in (("k", args.k, k), ("m", args.m, m), ("n", args.n, n)):
        if given is not None and given != got:
            raise UsageError(
                f"--{name} {given} does not match the matrices' {name.upper()}={got}; leave "
                f"--{name} out with --stationary / --moving"
            )


def _codes(args, own, pe_mode, formats):
    """The encodings of the user's matrices in the chosen formats."""
    from ncrtl.testbench.tensor_engine.operands import OperandError, operand_codes

    try:
        return {
            "stationary": operand_codes(
                own[0], pe_mode.formats_s[formats[0]], f"--stationary {args.stationary}"
            ),
            "moving": operand_codes(
                own[1], pe_mode.formats_m[formats[1]], f"--moving {args.moving}"
            ),
        }
    except OperandError as exc:
        raise UsageError(str(exc)) from None


def _check_pair(pe_mode, transpose, k, m, n, rows, cols, what, *, bf16_out=False, sparse=0):
    """The engine's rules for the LS + MM pair of one matmul (isa.check; ``sparse``: the
    compression ratio of a sparse one), with its message."""
    fields = dict(k=k, m=m, transpose=transpose, sparse=sparse)
    ls = Instruction(Op.LS, Mode(pe_mode.code), **fields)
    mm = Instruction(Op.MM, Mode(pe_mode.code), n=n, bf16_out=bf16_out, **fields)
    for ins, st in ((ls, None), (mm, ls)):
        bad = isa.check(ins, rows, cols, st)
        if bad is not None:
            raise UsageError(f"{what}: {bad[1]}")


def _golden_check(args, data, formats, pe_mode, transpose, rows, cols, chunk=None):
    """Run the golden on the user's matrices (each ``chunk`` rows apart, for the PSUM path)
    before anything is built: a transpose's moving matrix must be a selection matrix."""
    from ncrtl.model.fp import from_bits
    from ncrtl.model.tensor_engine.matmul import InstructionError, matmul

    fs, fm = pe_mode.formats_s[formats[0]], pe_mode.formats_m[formats[1]]
    s, x = data["stationary"], data["moving"]
    step = chunk or s.shape[0]
    try:
        for k0 in range(0, s.shape[0], step):
            matmul(
                from_bits(s[k0 : k0 + step], fs),
                from_bits(x[k0 : k0 + step], fm),
                perf_mode=pe_mode.perf_mode,
                is_transpose=transpose,
                rows=rows,
                cols=cols,
                stationary_format=fs,
                moving_format=fm,
            )
    except InstructionError as exc:
        where = f" (rows {k0}..{k0 + step - 1})" if chunk else ""
        raise UsageError(f"{_source(args)}{where}: {exc}") from None


def _announce(block, params, player=None, choice=None):
    """Say before an uncached build of a big engine that it takes minutes and GiB (``choice``:
    how the run steps it, a :class:`~ncrtl.testbench.tensor_engine.loop_run.BandChoice`)."""
    from ncrtl.testbench import progress
    from ncrtl.testbench.conformance import find_build
    from ncrtl.testbench.tensor_engine.loop_run import cached_bands

    if params["rows"] * params["cols"] < BIG_ENGINE:
        return
    bands = choice is not None and choice.bands > 1
    if bands and cached_bands(block, params, choice.bands) is not None:
        return
    if not bands and find_build(block, params, player=player) is not None:
        return
    progress.say(
        f"note: the {params['rows']} x {params['cols']} {block.name} build is not cached yet: "
        f"it is generated and built first ({BIG_BUILD['bands' if bands else 'one model']}); "
        f"later runs reuse it. --rows 8 --cols 8 builds in about a minute."
    )


def _pe_build(build, args, bandable=True):
    """Say which PE the run builds and why (the narrowest family serving it unless
    ``--pe-modes`` names one), how it steps the engine (column bands on the machine's cores
    at full size, else one model, with the reason; ``bandable``: the run is of the Tensor
    Engine alone) and that an uncached big engine takes minutes; ``build`` is ``(block,
    params, player ports, why)``.  Returns ``(pe_modes, BandChoice or None)``."""
    from ncrtl.testbench import progress
    from ncrtl.testbench.tensor_engine.loop_run import BAND_MIN_PES, band_choice

    block, params, ports, why = build
    choice = None
    if bandable:
        try:
            choice = band_choice(params, bands=args.bands, waves=args.waves, player=True)
        except ValueError as e:
            raise UsageError(str(e)) from None
    elif args.bands not in (None, 1):
        raise UsageError(
            f"--bands {args.bands}: the matmul path into PSUM (--psum) runs as one model; "
            f"bands cut the Tensor Engine alone"
        )
    say_pe_build(why, "--pe-modes")
    if choice is not None and (
        choice.bands > 1
        or args.bands is not None
        or params["rows"] * params["cols"] >= BAND_MIN_PES
    ):
        progress.say(choice.line())
    _announce(block, params, ports, choice)
    return params["pe_modes"], choice


def _cmd_sim(args):
    if args.what != "matmul":
        raise UsageError(f"unknown simulation {args.what!r}; allowed: matmul")
    _check_seed(args.seed)
    if args.out is not None:
        check_output(args.out, "--out")
    if args.sparse is not None:
        return _sim_sparse(args)
    if args.mask is not None or args.tags is not None:
        raise UsageError(
            "--mask / --tags describe a sparse stationary: they go with --sparse M:N "
            f"({', '.join(SPARSE_PATTERNS)})"
        )
    if args.dtype in MX_DTYPES:
        return _sim_mx(args)
    _check_dtype(args)
    if args.psum is not None:
        return _sim_psum(args)
    if args.rounding != "rne":
        raise UsageError("--rounding applies to a BF16 PSUM: give --psum bf16")
    from ncrtl.testbench.tensor_engine.simulate import engine_build, sim_matmul

    block = blocks.get("pe_array")
    rows, cols = _size(args, "rows", block), _size(args, "cols", block)
    pe_mode, transpose = operation(args.dtype)
    formats = _formats(args, pe_mode, transpose)
    own = _own_data(args)
    data = None
    k, m, n, what = _sizes(
        args,
        own,
        pe_mode,
        rows,
        cols,
        f"; give BF16 matrices with an MX dtype ({', '.join(MX_DTYPES)}) to run them through "
        "QuantizeMX and the MX matmul",
    )
    _check_pair(pe_mode, transpose, k, m, n, rows, cols, what)
    if own is not None:
        data = _codes(args, own, pe_mode, formats)
        _golden_check(args, data, formats, pe_mode, transpose, rows, cols)
    pe_modes, bands = _pe_build(engine_build(rows, cols, args.dtype, pe_modes=args.pe_modes), args)
    return sim_matmul(
        rows=rows,
        cols=cols,
        dtype=args.dtype,
        k=k,
        m=m,
        n=n,
        pe_modes=pe_modes,
        bands=bands,
        **_run_options(args, formats, data, own),
    )


def _check_dtype(args):
    """``--dtype`` an operation of the engine (not an MX dtype), without ``--moving-dtype``."""
    if args.moving_dtype is not None:
        raise UsageError(
            f"--moving-dtype applies to the MX dtypes ({', '.join(MX_DTYPES)}), not to "
            f"--dtype {args.dtype}"
        )
    if args.dtype not in blocks.TE_MODES:
        raise UsageError(
            f"--dtype {args.dtype!r} is not allowed; allowed: "
            f"{', '.join(blocks.TE_MODES + tuple(MX_DTYPES))}"
        )


def _sim_sparse(args):
    """``ncrtl sim matmul --sparse M:N``: one sparse matmul on the engine with the sparse path,
    on random data or the user's matrices (a dense stationary, with ``--mask`` or its
    non-zeros kept, or a compressed one with ``--tags``)."""
    from ncrtl.model.modes import get_mode
    from ncrtl.testbench.tensor_engine.simulate import engine_build, sim_matmul_sparse

    ratio = sparse_ratio(args.sparse)
    if args.dtype in MX_DTYPES:
        # the MX chain's matmul: refused by the sparse rule below, with the modes that have it
        pe_mode, transpose = get_mode("mx"), False
    else:
        _check_dtype(args)
        pe_mode, transpose = operation(args.dtype)
    if args.psum is not None or args.rounding != "rne":
        raise UsageError(
            "--psum / --rounding do not apply with --sparse: the sparse matmul runs on the "
            "Tensor Engine alone (the matmul path into PSUM is built without the sparse path)"
        )
    block = blocks.get("pe_array")
    rows, cols = _size(args, "rows", block), _size(args, "cols", block)
    # The instruction rules that do not depend on the sizes (a mode with sparse matmuls, no
    # transpose), checked on an instruction whose sizes every array takes.
    mode_only = Instruction(
        Op.LS,
        Mode(pe_mode.code),
        k=SPARSE_GROUP,
        m=pe_mode.m_multiple,
        transpose=transpose,
        sparse=ratio,
    )
    bad = isa.check(mode_only, isa.MAX_ARRAY, isa.MAX_ARRAY)
    if bad is not None:
        raise UsageError(f"--dtype {args.dtype} --sparse {args.sparse}: {bad[1]}")
    # BlockError: rows % 4, a --pe-modes without the mode
    engine = engine_build(rows, cols, args.dtype, sparse=True, pe_modes=args.pe_modes)
    formats = _formats(args, pe_mode, transpose)
    data = _sparse_files(args, pe_mode, formats, ratio)
    if data is None:
        k, m, n = _given(args.k, rows), _given(args.m, cols), _given(args.n, 512)
        _check_pair(
            pe_mode, transpose, k, m, n, rows, cols, f"--k {k} --m {m} --n {n}", sparse=ratio
        )
    else:
        # the golden's rules: the instruction's (as above), the operands' shapes and the tags
        _sparse_golden_check(args, data, pe_mode, formats, ratio, rows, cols)
        (k, m), n = data["values"].shape, data["moving"].shape[2]
        _match_sizes(args, k, m, n)
    pe_modes, bands = _pe_build(engine, args)
    return sim_matmul_sparse(
        rows=rows,
        cols=cols,
        dtype=args.dtype,
        ratio=ratio,
        k=k,
        m=m,
        n=n,
        seed=args.seed,
        waves=args.waves,
        formats=formats,
        special=args.values == "special",
        data=data,
        source=_sparse_source(args) if data is not None else "",
        out=args.out,
        pe_modes=pe_modes,
        bands=bands,
    )


def _sparse_source(args):
    """The user's sparse matrices, as the messages and the figures name them."""
    extra = "".join(
        f" with {flag} {path}"
        for flag, path in (("--mask", args.mask), ("--tags", args.tags))
        if path is not None
    )
    return _source(args) + extra


def _sparse_files(args, pe_mode, formats, ratio):
    """``{"values", "tag", "moving"}`` (compressed stationary codes ``[K, M]``, packed tags,
    moving codes ``[K, R, N]``) of ``--stationary`` / ``--moving`` with ``--mask`` or
    ``--tags``, or None without files.  A dense stationary is compressed by the golden's
    ``compress`` (the mask's positions, or its non-zeros), whose rules name a broken group."""
    from ncrtl.model.fp import from_bits, get_format
    from ncrtl.model.tensor_engine.matmul import InstructionError
    from ncrtl.model.tensor_engine.sparse import compress
    from ncrtl.testbench.tensor_engine.operands import OperandError, operand_codes

    own = _own_data(args)
    if own is None:
        if args.mask is not None or args.tags is not None:
            raise UsageError(
                "--mask / --tags go with --stationary S.npy and --moving X.npy (your sparse "
                "stationary and moving matrices)"
            )
        return None
    if args.mask is not None and args.tags is not None:
        raise UsageError(
            "--mask goes with a dense stationary [K x R, M], --tags with a compressed one "
            "[K, M]: give one of them"
        )
    fs, fm = pe_mode.formats_s[formats[0]], pe_mode.formats_m[formats[1]]
    try:
        s = operand_codes(own[0], fs, f"--stationary {args.stationary}")
        x = operand_codes(own[1], fm, f"--moving {args.moving}")
    except OperandError as exc:
        raise UsageError(str(exc)) from None
    if x.ndim == 2 and x.shape[0] % ratio == 0:
        x = x.reshape(x.shape[0] // ratio, ratio, x.shape[1])  # [K R, N] -> [K, R, N]
    elif x.ndim != 3:
        raise UsageError(
            f"--moving {args.moving}: shape {list(x.shape)}; with --sparse {args.sparse} the "
            f"moving is [K x {ratio}, N] (dense rows) or [K, {ratio}, N]"
        )
    if args.tags is not None:
        return {"values": s, "tag": load_npy(args.tags, "--tags"), "moving": x}
    mask = None
    if args.mask is not None:
        mask = load_npy(args.mask, "--mask")
        if mask.dtype != bool:
            raise UsageError(
                f"--mask {args.mask}: dtype {mask.dtype}; a mask is a bool array, True at the "
                f"kept positions"
            )
    try:
        kept, tag = compress(from_bits(s, fs), ratio, mask)
    except InstructionError as exc:
        raise UsageError(f"{_sparse_source(args)}: {exc}") from None
    return {"values": kept.view(get_format(fs).storage_dtype), "tag": tag, "moving": x}


def _sparse_golden_check(args, data, pe_mode, formats, ratio, rows, cols):
    """Run the golden ``matmul_sparse`` on the user's matrices before anything is built: its
    rules on the tags (dtype, shape, elements below the ratio, four positions per group) and on
    the moving's ``[K, R, N]``."""
    from ncrtl.model.fp import from_bits
    from ncrtl.model.tensor_engine.matmul import InstructionError
    from ncrtl.model.tensor_engine.sparse import matmul_sparse

    fs, fm = pe_mode.formats_s[formats[0]], pe_mode.formats_m[formats[1]]
    try:
        matmul_sparse(
            from_bits(data["moving"], fm),
            from_bits(data["values"], fs),
            data["tag"],
            ratio,
            rows=rows,
            cols=cols,
            stationary_format=fs,
            moving_format=fm,
        )
    except InstructionError as exc:
        raise UsageError(f"{_sparse_source(args)}: {exc}") from None


def _sizes(args, own, pe_mode, rows, cols, mx_hint):
    """``(k, m, n, what)`` of a run: the shapes of the user's matrices ``own`` (none for the mx
    mode, whose block scales they cannot carry: ``mx_hint`` says what to do instead), or the
    size options with their defaults; ``what`` names them in messages."""
    if own is None:
        k, m, n = _given(args.k, rows), _given(args.m, cols), _given(args.n, 512)
        return k, m, n, f"--k {k} --m {m} --n {n}"
    if pe_mode.scale:
        raise UsageError(
            "--stationary / --moving with --dtype mx: the mx mode takes MX codes and block "
            "scales" + mx_hint
        )
    k, m, n = _shapes(args, own, pe_mode)
    return k, m, n, f"{_source(args)} (K={k} M={m} N={n})"


def _run_options(args, formats, data, own):
    """The options every RTL run of ``ncrtl sim`` takes from the command line."""
    return {
        "seed": args.seed,
        "waves": args.waves,
        "formats": formats,
        "special": args.values == "special",
        "data": data,
        "source": _source(args) if own is not None else "",
        "out": args.out,
    }


def _sim_psum(args):
    """``ncrtl sim matmul --psum``: the chunked matmul (or a transpose) into PSUM."""
    from ncrtl.testbench.core.simulate import core_build, sim_matmul_psum

    block = blocks.get("core")
    rows, cols = _size(args, "rows", block), _size(args, "cols", block)
    if args.dtype not in blocks.CORE_MODES:
        raise UsageError(
            f"--dtype {args.dtype!r} is not allowed with --psum; allowed: "
            f"{', '.join(blocks.CORE_MODES)}"
        )
    pe_mode, transpose = operation(args.dtype)
    if args.rounding != "rne" and (transpose or args.psum != "bf16"):
        raise UsageError(
            f"--rounding {args.rounding} applies to a BF16 accumulation (--psum bf16), not to "
            + (
                "a transpose: it writes raw 16-bit words (RAW16)"
                if transpose
                else f"--psum {args.psum}"
            )
        )
    formats = _formats(args, pe_mode, transpose)
    own = _own_data(args)
    k, m, n, what = _sizes(
        args,
        own,
        pe_mode,
        rows,
        cols,
        ", which the PSUM path draws at random; run your BF16 matrices with an MX dtype "
        f"({', '.join(MX_DTYPES)}) without --psum",
    )
    if transpose and k != rows:
        raise UsageError(
            f"{what}: a transpose into PSUM moves one tile of K = --rows {rows} partitions (each "
            f"write overwrites its columns: nothing accumulates); K={k}"
        )
    if k < 1 or k % rows:
        raise UsageError(
            f"{what}: K={k} must be a positive multiple of --rows {rows} with --psum (one "
            f"accumulated matmul per {rows} rows)"
        )
    chunks_max = next(q for q in block.params if q.name == "chunks").maximum
    if k // rows > chunks_max:
        raise UsageError(
            f"{what}: K={k} is {k // rows} matmuls of {rows} rows; at most {chunks_max} "
            f"accumulate in one run"
        )
    if m != cols:
        raise UsageError(
            f"{what}: M={m} must equal --cols {cols} with --psum (every partition of the bank "
            f"is written)"
        )
    limit = pe_mode.n_limit(args.psum == "bf16" and not transpose)
    if not 1 <= n <= limit:
        into = "RAW16" if transpose else f"{args.psum}"
        raise UsageError(f"{what}: N={n} must be in 1..{limit} ({args.dtype} into {into} PSUM)")
    _check_pair(
        pe_mode,
        transpose,
        rows,
        cols,
        n,
        rows,
        cols,
        what,
        bf16_out=args.psum == "bf16" and not transpose,
    )
    data = None
    if own is not None:
        data = _codes(args, own, pe_mode, formats)
        _golden_check(args, data, formats, pe_mode, transpose, rows, cols, chunk=rows)
    build = core_build(
        rows, cols, args.dtype, args.psum, args.rounding, k // rows, n, args.pe_modes
    )
    pe_modes, _ = _pe_build(build, args, bandable=False)
    return sim_matmul_psum(
        rows=rows,
        cols=cols,
        dtype=args.dtype,
        k=k,
        n=n,
        psum=args.psum,
        rounding=args.rounding,
        pe_modes=pe_modes,
        **_run_options(args, formats, data, own),
    )


def _sim_mx(args):
    """``ncrtl sim matmul --dtype mxfp8_*|mxfp4_*``: the QuantizeMX + MX matmul chain."""
    from ncrtl.testbench.tensor_engine.simulate import engine_build, sim_matmul_mx

    moving = args.moving_dtype or args.dtype
    if moving not in MX_DTYPES:
        raise UsageError(
            f"--moving-dtype {moving!r} is not an MX dtype; allowed: {', '.join(MX_DTYPES)}"
        )
    if args.psum is not None or args.rounding != "rne":
        raise UsageError(
            "--psum and --rounding do not apply to the MX chain; --dtype mx --psum fp32|bf16 "
            "runs MX matmuls into PSUM"
        )
    if args.format is not None or args.moving_format is not None:
        raise UsageError(
            "--format / --moving-format do not apply to the MX chain: --dtype and --moving-dtype "
            "name its element formats"
        )
    block = blocks.get("pe_array")
    rows, cols = _size(args, "rows", block), _size(args, "cols", block)
    if rows < 32 or rows % 32:
        raise UsageError(
            f"--rows {rows}: the MX chain needs a multiple of 32 rows (QuantizeMX groups "
            f"and the scale quadrants span 32 partitions)"
        )
    own = _own_data(args)
    sources = None
    if own is not None:
        import ml_dtypes

        from ncrtl.testbench.tensor_engine.operands import OperandError, operand_codes

        s, x = own
        if s.ndim != 2 or x.ndim != 2 or s.shape[1] % 4 or x.shape[1] % 4:
            raise UsageError(
                f"{_source(args)}: shapes {list(s.shape)} and {list(x.shape)}; the MX chain "
                f"takes BF16 [K, 4M] and [K, 4N] (4 packed elements per partition and column)"
            )
        if s.shape[0] != x.shape[0]:
            raise UsageError(
                f"{_source(args)}: K differs ({s.shape[0]} and {x.shape[0]} rows); both "
                f"matrices have the contraction's K rows"
            )
        k, m, n = s.shape[0], s.shape[1] // 4, x.shape[1] // 4
        _match_sizes(args, k, m, n)
        try:
            sources = tuple(
                operand_codes(a, "bf16", f"{flag} {path}").view(ml_dtypes.bfloat16)
                for a, flag, path in (
                    (s, "--stationary", args.stationary),
                    (x, "--moving", args.moving),
                )
            )
        except OperandError as exc:
            raise UsageError(str(exc)) from None
        what = f"{_source(args)} (K={k} partitions M={m} N={n})"
    else:
        k, m, n = _given(args.k, rows), _given(args.m, cols), _given(args.n, 512)
        what = f"--k {k} --m {m} --n {n}"
    # The engine's own rules for the LS + MM pair (K partitions, M, N), with its messages.
    fields = dict(k=k, m=m, fmt_s=MX_FORMATS.index(MX_DTYPES[args.dtype]))
    fields["fmt_m"] = MX_FORMATS.index(MX_DTYPES[moving])
    ls = Instruction(Op.LS, Mode.MX, **fields)
    for ins, st in ((ls, None), (Instruction(Op.MM, Mode.MX, n=n, **fields), ls)):
        bad = isa.check(ins, rows, cols, st)
        if bad is not None:
            raise UsageError(f"{what}: {bad[1]}")
    pe_modes, bands = _pe_build(engine_build(rows, cols, "mx", pe_modes=args.pe_modes), args)
    return sim_matmul_mx(
        rows=rows,
        cols=cols,
        dtype=args.dtype,
        moving_dtype=moving,
        k=k,
        m=m,
        n=n,
        scale_rule=args.scale_rule,
        seed=args.seed,
        waves=args.waves,
        sources=sources,
        source=_source(args) if own is not None else "",
        special=args.values == "special",
        out=args.out,
        pe_modes=pe_modes,
        bands=bands,
    )


def add_parser(sub, raw):
    """The ``sim`` subcommand's arguments."""
    s = sub.add_parser(
        "sim",
        help="simulate one Tensor Engine matmul (optionally accumulated in "
        "PSUM) on the RTL, on random data or your matrices, and print its figures",
        epilog=_dtypes_epilog(),
        formatter_class=raw,
    )
    s.add_argument("what", help="what to simulate: matmul")
    s.add_argument(
        "--rows",
        type=int,
        default=128,
        help="array rows (contraction partitions), 2..128 (default 128, the hardware's)",
    )
    s.add_argument(
        "--cols",
        type=int,
        default=128,
        help="array columns (output partitions), 2..128 (default 128, the hardware's)",
    )
    s.add_argument(
        "--dtype",
        default="bf16",
        metavar="OPERATION",
        help=f"a mode's matmul or transpose (default bf16): {', '.join(blocks.TE_MODES)}; "
        f"with --psum: {', '.join(blocks.CORE_MODES)}; or an MX dtype "
        f"({', '.join(MX_DTYPES)}): the QuantizeMX + MX matmul chain (limits below)",
    )
    s.add_argument(
        "--format",
        metavar="FORMAT",
        help="the stationary element format, for modes with several (fp8: fp8_e4m3, "
        "fp8_e4m3fn, fp8_e5m2, fp8_e3m4; double_row: the first three); default: the mode's "
        "first",
    )
    s.add_argument(
        "--moving-format",
        metavar="FORMAT",
        help="the moving element format (default: --format where the mode allows it)",
    )
    s.add_argument(
        "--moving-dtype",
        metavar="MXDTYPE",
        help=f"the MX chain's moving dtype, {', '.join(MX_DTYPES)} (default: --dtype)",
    )
    s.add_argument(
        "--scale-rule",
        choices=("trn3", "ocp"),
        default="trn3",
        help="QuantizeMX scale rule of the MX chain: trn3 or ocp (default trn3)",
    )
    s.add_argument(
        "--k",
        type=int,
        help="contraction partitions K (default: --rows; with --psum a multiple of --rows; "
        "double_row / MX: partitions of 2 / 4 elements; --sparse: the compressed rows, a "
        "multiple of 4, a dense contraction of K x R rows)",
    )
    s.add_argument(
        "--m", type=int, help="stationary free size M, 1..cols (default: --cols; --psum: --cols)"
    )
    s.add_argument(
        "--n",
        type=int,
        help="moving free size N, 1..512 (MX into BF16 PSUM: 1..1024; default 512)",
    )
    s.add_argument(
        "--stationary",
        metavar="S.npy",
        help="your stationary matrix [K, M] (.npy; formats below) instead of random data; "
        "K, M and N then come from the matrices (--sparse: dense [K x R, M], or compressed "
        "[K, M] with --tags)",
    )
    s.add_argument(
        "--moving",
        metavar="X.npy",
        help="your moving matrix [K, N] (.npy), with --stationary (--sparse: [K x R, N] or "
        "[K, R, N])",
    )
    s.add_argument(
        "--sparse",
        metavar="M:N",
        help=f"an M:N structured-sparse matmul (nc_matmul_sparse): "
        f"{', '.join(f'{p} (R = {r})' for p, r in SPARSE_PATTERNS.items())}, on the engine "
        f"built with the sparse path (rows a multiple of 4); --dtype "
        f"{', '.join(m.name for m in SPARSE_MODES)}; also compared with the dense golden on "
        f"the decompressed stationary (default: dense)",
    )
    s.add_argument(
        "--mask",
        metavar="MASK.npy",
        help="--sparse with your dense stationary [K x R, M]: a bool array of its shape, True "
        "at the kept positions (at most 4 of every 4R rows of a column; default: its "
        "non-zeros)",
    )
    s.add_argument(
        "--tags",
        metavar="T.npy",
        help="--sparse with your compressed stationary [K, M]: its packed physical tags, uint16 "
        "[K, ceil(M / 4)] (4 bits per element: partition << 2 | element within the group)",
    )
    s.add_argument(
        "--out",
        metavar="R.npy",
        help="write the RTL's result [M, N] as float32 to this .npy file (default: not written)",
    )
    s.add_argument(
        "--values",
        choices=("normal", "special"),
        default="normal",
        help="random data: normal (finite values over a few binades; default) or special "
        "(signed zeros, subnormals, infinities and NaNs mixed in)",
    )
    s.add_argument(
        "--psum",
        choices=("fp32", "bf16"),
        help="write the result into PSUM (Tensor Engine + PSUM): K is split into "
        "K / rows matmuls accumulated in one group of this dtype, fp32 or bf16 (default: "
        "no PSUM)",
    )
    s.add_argument(
        "--rounding",
        choices=("rne", "sr"),
        default="rne",
        help="BF16 PSUM rounding with --psum bf16: rne or sr (default rne)",
    )
    s.add_argument(
        "--pe-modes",
        metavar="MODES",
        help="the modes the PEs are built for: all (the reference and synthesis design), a "
        "family (bf16, fp8, fp32, mx) or modes joined by '+' (default: the narrowest family "
        "serving --dtype, said on stderr)",
    )
    s.add_argument(
        "--bands",
        type=int,
        metavar="N",
        help="step the PE array as N column bands, each a model of its own, on up to N of the "
        "machine's cores (1: one model, the cocotb testbench; default: from 64 x 64 PEs up as "
        "many bands as cores, one model below, where bands do not apply, said on stderr)",
    )
    _seed_arg(s)
    s.add_argument(
        "--waves", action="store_true", help="record FST waveforms (same as WAVES=1; default off)"
    )
    s.set_defaults(func=_cmd_sim)
