"""The ``ncrtl`` command line: generate Verilog, lint, run conformance and benchmarks.

Every command takes a block name from :mod:`ncrtl.blocks` (``ncrtl list`` shows them) and block
parameters as ``--param name=value``.  Bad input (unknown block, parameter or value, a seed, a
probability or a size out of range, a path that cannot be written, a matrix file that does not
fit) gets one line naming the bad value and the rule, and exit status 2, before anything is
built.
"""

import argparse
import math
import sys
import time

from . import blocks
from .model.modes import MX_DTYPES, MX_FORMATS, operation
from .model.tensor_engine import isa
from .model.tensor_engine.isa import Instruction, Mode, Op
from .testbench.outputs import OutputError, check_output, write_output

__all__ = ["main"]


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit status 2."""


#: Seeds every command takes: the testbenches seed numpy, Python's ``random`` and the Verilog
#: stream players' 32-bit generators with them.
MAX_SEED = (1 << 32) - 1

#: Engines of at least this many PEs build for minutes: ``ncrtl sim`` says so before it starts
#: an uncached build, with the figures of :data:`BIG_BUILD`.
BIG_ENGINE = 64 * 64
BIG_BUILD = (
    "the 128 x 128 engine took 4 to 5 minutes (Verilog generation 20 s, Verilator build 3.5 "
    "to 5 min) and up to 11 GiB of memory on a 2-core machine"
)


def _check_seed(seed):
    if not 0 <= seed <= MAX_SEED:
        raise UsageError(f"--seed {seed} must be in 0..{MAX_SEED} (an unsigned 32-bit seed)")


def _check_stall(stall):
    if not (math.isfinite(stall) and 0 <= stall < 1):
        raise UsageError(
            f"--stall {stall} must be a probability in [0, 1): the share of idle input cycles "
            f"and of backpressure cycles (1 would never move a beat)"
        )


def _parse_params(items, args=None):
    params, given = {}, {}
    # Shortcut flags (--rows 8 is --param rows=8).
    for flag in ("rows", "cols", "mode"):
        value = getattr(args, flag, None) if args is not None else None
        if value is not None:
            params[flag], given[flag] = str(value), f"--{flag} {value}"
    for item in items or ():
        if "=" not in item:
            raise UsageError(f"--param {item!r} is not of the form name=value")
        k, v = (part.strip() for part in item.split("=", 1))
        if k in params:
            raise UsageError(
                f"--param {k}={v}: {k} is already given by {given[k]}; give each parameter once"
            )
        params[k], given[k] = v, f"--param {k}={v}"
    return params


def _cmd_list(args):
    for b in blocks.all_blocks():
        print(f"{b.name:14s} {b.summary}")
        for p in b.params:
            choices = f" (one of: {', '.join(map(str, p.choices))})" if p.choices else ""
            print(
                f"{'':16s}--param {p.name}=<{p.kind.__name__}>  default {p.default!r}{choices}: {p.help}"
            )
    for g, members in blocks.GROUPS.items():
        names = sorted({b for b, _ in members})
        print(f"{g:14s} group of {len(members)} configurations of {', '.join(names)}")
    return 0


def _cmd_verilog(args):
    from ncrtl.testbench import progress

    block = blocks.get(args.block)
    params = block.resolve(_parse_params(args.param, args))
    out = check_output(args.output, "-o", folder=True)
    t0 = time.perf_counter()
    with progress.step(f"Verilog generation of {block.top(**params)}"):
        text, top = block.verilog(params)
    path = out / f"{top}.v"
    write_output(out, "-o", lambda folder: path.write_text(text), folder=True)
    print(
        f"wrote {path} ({len(text.splitlines())} lines, top module {top}) "
        f"in {time.perf_counter() - t0:.2f} s"
    )
    return 0


def _expand(name, param_items, args=None):
    """A block or a group -> list of (block, resolved params).

    A name that is both a group and a block (``psum``) means the group, or the block when
    parameters are given."""
    user = _parse_params(param_items, args)
    is_block = name in {b.name for b in blocks.all_blocks()}
    if name in blocks.GROUPS and not (user and is_block):
        if user:
            raise UsageError(f"--param is not accepted with the group {name!r}; name one block")
        return [(blocks.get(b), blocks.get(b).resolve(p)) for b, p in blocks.GROUPS[name]]
    b = blocks.get(name)
    return [(b, b.resolve(user))]


def _cmd_lint(args):
    from ncrtl.testbench import progress
    from ncrtl.testbench.lint import lint_verilog, synth_check

    failed = 0
    for block, params in _expand(args.block, args.param, args):
        top = block.top(**params)
        with progress.step(f"Verilog generation of {top}"):
            text, top = block.verilog(params)
        with progress.step(f"Verilator lint of {top}"):
            lint = lint_verilog(text, top)
        with progress.step(f"Yosys synthesis of {top}"):
            synth = synth_check(block.verilog(params, synthesis=True)[0], top)
        ok = lint.ok and synth.ok
        failed += not ok
        print(
            f"{block.label(params):44s} lint {'clean' if lint.ok else 'FAILED'}   "
            f"synth {'ok, no latches' if synth.ok else 'FAILED'}"
        )
        if not lint.ok:
            print(lint.log)
        if not synth.ok:
            print(synth.log)
    return 1 if failed else 0


def _cmd_conformance(args):
    from ncrtl.testbench.conformance import run_conformance

    runs = _expand(args.block, args.param, args)
    if args.count < 1:
        raise UsageError(f"--count must be >= 1, got {args.count}")
    _check_seed(args.seed)
    _check_stall(args.stall)
    if args.junit:
        check_output(args.junit, "--junit")
    return run_conformance(
        runs,
        count=args.count,
        seed=args.seed,
        junit=args.junit,
        stall=args.stall,
        waves=args.waves,
        progress=True,
    )


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


def _load(path, flag):
    """The array in the ``.npy`` file ``path`` (``--stationary`` / ``--moving``)."""
    import numpy as np

    try:
        with open(path, "rb") as f:
            magic = f.read(6)
        if magic[:2] == b"PK":
            raise UsageError(f"{flag} {path}: an .npz archive; give one array saved with np.save")
        if magic != b"\x93NUMPY":
            raise UsageError(
                f"{flag} {path}: not a .npy file (it does not begin with the .npy header; a "
                f"text or other file named .npy?): save the array with np.save"
            )
        arr = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise UsageError(f"{flag} {path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{flag} {path}: a folder, not a .npy file") from None
    except ValueError as exc:
        if "pickle" in str(exc):
            raise UsageError(
                f"{flag} {path}: a .npy of Python objects; give an array of numbers"
            ) from None
        raise UsageError(f"{flag} {path}: not a readable .npy array ({exc})") from None
    except (OSError, EOFError) as exc:
        raise UsageError(f"{flag} {path}: not a readable .npy array ({exc})") from None
    if not isinstance(arr, np.ndarray):
        raise UsageError(f"{flag} {path}: an .npz archive; give one array saved with np.save")
    return arr


def _given(value, default):
    """A size flag's value, or its default when the flag was not given (0 is a value)."""
    return default if value is None else value


def _own_data(args):
    """``(stationary array, moving array)`` of ``--stationary`` / ``--moving``, or None."""
    if (args.stationary is None) != (args.moving is None):
        raise UsageError("--stationary and --moving go together: give both matrices, or neither")
    if args.stationary is None:
        return None
    return _load(args.stationary, "--stationary"), _load(args.moving, "--moving")


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
    for name, given, got in (("k", args.k, k), ("m", args.m, m), ("n", args.n, n)):
        if given is not None and given != got:
            raise UsageError(
                f"--{name} {given} does not match the matrices' {name.upper()}={got}; leave "
                f"--{name} out with --stationary / --moving"
            )
    return k, m, n


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


def _check_pair(pe_mode, transpose, k, m, n, rows, cols, what, *, bf16_out=False):
    """The engine's rules for the LS + MM pair of one matmul (isa.check), with its message."""
    fields = dict(k=k, m=m, transpose=transpose)
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


def _announce(block, params, player=None):
    """Say before an uncached build of a big engine that it takes minutes and GiB."""
    from ncrtl.testbench import progress
    from ncrtl.testbench.conformance import find_build

    if params["rows"] * params["cols"] < BIG_ENGINE:
        return
    if find_build(block, params, player=player) is not None:
        return
    progress.say(
        f"note: the {params['rows']} x {params['cols']} {block.name} build is not cached yet: "
        f"it is generated and built first ({BIG_BUILD}); later runs reuse it. --rows 8 --cols 8 "
        f"builds in about a minute."
    )


def _cmd_sim(args):
    if args.what != "matmul":
        raise UsageError(f"unknown simulation {args.what!r}; allowed: matmul")
    _check_seed(args.seed)
    if args.out is not None:
        check_output(args.out, "--out")
    if args.dtype in MX_DTYPES:
        return _sim_mx(args)
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
    _announce(*engine_build(rows, cols, args.dtype))
    return sim_matmul(
        rows=rows,
        cols=cols,
        dtype=args.dtype,
        k=k,
        m=m,
        n=n,
        **_run_options(args, formats, data, own),
    )


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
    _announce(*core_build(rows, cols, args.dtype, args.psum, args.rounding, k // rows, n))
    return sim_matmul_psum(
        rows=rows,
        cols=cols,
        dtype=args.dtype,
        k=k,
        n=n,
        psum=args.psum,
        rounding=args.rounding,
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
        for name, given, got in (("k", args.k, k), ("m", args.m, m), ("n", args.n, n)):
            if given is not None and given != got:
                raise UsageError(
                    f"--{name} {given} does not match the matrices' {name.upper()}={got}; leave "
                    f"--{name} out with --stationary / --moving"
                )
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
    _announce(*engine_build(rows, cols, "mx"))
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
    )


def _cmd_bench(args):
    from ncrtl.testbench.bench import run_bench

    for flag, value, least in (("--count", args.count, 1), ("--pe-cycles", args.pe_cycles, 1)):
        if not least <= value <= 10**8:
            raise UsageError(f"{flag} {value} must be in {least}..{10**8}")
    if not (args.te_size == 0 or 2 <= args.te_size <= 128):
        raise UsageError(f"--te-size {args.te_size} must be 0 (skip) or in 2..128")
    if args.bands < 1:
        raise UsageError(f"--bands {args.bands} must be at least 1")
    if not 0 <= args.psum_partitions <= 128:
        raise UsageError(f"--psum-partitions {args.psum_partitions} must be in 0..128")
    if not 1 <= args.dma_partitions <= 128:
        raise UsageError(f"--dma-partitions {args.dma_partitions} must be in 1..128")
    if not 0 <= args.harness_size <= 128 or args.harness_size == 1:
        raise UsageError(f"--harness-size {args.harness_size} must be 0 or in 2..128")
    if args.harness_repeat < 1:
        raise UsageError(f"--harness-repeat must be >= 1, got {args.harness_repeat}")
    if args.psum_count < 1:
        raise UsageError(f"--psum-count must be >= 1, got {args.psum_count}")
    from ncrtl.model.modes import get_mode, pe_modes

    for spec in args.pe_modes.split(","):
        try:
            served = pe_modes(spec)
        except ValueError as e:
            raise UsageError(f"--pe-modes: {e}") from None
        if args.only in (None, "te", "bands") and args.te_size and get_mode("bf16") not in served:
            raise UsageError(
                f"--pe-modes {spec!r} does not serve bf16, the mode of the measured matmul"
            )
    if args.only == "bands":
        from .hdl.tensor_engine.band import band_plan
        from .model.tensor_engine.timing import chain_width

        if not 2 <= args.te_size <= 128:
            raise UsageError(f"--only bands needs --te-size in 2..128, got {args.te_size}")
        try:
            band_plan(args.te_size, args.bands, chain_width(args.te_size))
        except ValueError as e:
            raise UsageError(f"--bands {args.bands}: {e}") from None
        spec = args.band_threads or "1"
        if not all(t.strip().isdigit() and int(t) >= 1 for t in spec.split(",")):
            raise UsageError(f"--band-threads {spec!r} must be thread counts >= 1, comma-separated")
    return run_bench(args)


def _cmd_timing(args):
    """``ncrtl timing matmul``: figures of R nc_matmuls from the timing model alone."""
    from .model.modes import operations
    from .model.tensor_engine import timing

    if args.what != "matmul":
        raise UsageError(f"timing {args.what!r} is not a timing command; allowed: matmul")
    if args.dtype not in operations():
        raise UsageError(
            f"--dtype {args.dtype!r} is not allowed; allowed: {', '.join(operations())}"
        )
    for name in ("rows", "cols"):
        value = getattr(args, name)
        if not 1 <= value <= isa.MAX_ARRAY:
            raise UsageError(
                f"--{name} {value} must be in 1..{isa.MAX_ARRAY} (the instruction's 8-bit K, M "
                f"and tile fields)"
            )
    if args.trace:
        check_output(args.trace, "--trace")
    if args.tile_unit < 1:
        raise UsageError(f"--tile-unit {args.tile_unit} must be at least 1")
    tile = None
    if args.tile_size is not None:
        try:
            tile = tuple(int(v) for v in args.tile_size.split(","))
        except ValueError:
            tile = ()
        if len(tile) != 2:
            raise UsageError(f"--tile-size {args.tile_size!r} must be ROWS,COLS (two integers)")
    # K and M default to the tile's size: a full tile, whatever the array.
    k = args.k if args.k is not None else (tile or (args.rows, args.cols))[0]
    m = args.m if args.m is not None else (tile or (args.rows, args.cols))[1]
    rules = {
        "documented": timing.DOCUMENTED,
        "hdl": timing.HDL_SERIAL,
        "hdl-parallel": timing.HDL_PARALLEL,
        "hdl-background": timing.HDL_BACKGROUND,
        "one-chain": timing.ONE_CHAIN,
    }[args.rules]
    try:
        prog = timing.matmul_program(
            k,
            m,
            args.n,
            args.dtype,
            repeat=args.repeat,
            tile=tile,
            tiles=args.tiles,
            rows=args.rows,
            cols=args.cols,
            bf16_out=args.bf16_out,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    from .testbench import progress

    with progress.step(f"timing model: {len(prog):,} instructions") as state:

        def counted():
            for i, ins in enumerate(prog):
                if i % 8192 == 0:
                    state["detail"] = f"{i:,} / {len(prog):,} instructions"
                yield ins

        sched = timing.simulate(
            counted(), args.rows, args.cols, tile_unit=args.tile_unit, rules=rules
        )
    bad = next((r for r in sched.records if not r.accepted), None)
    if bad is not None:
        raise UsageError(
            f"instruction {bad.index} ({bad.instruction.op.name}) is rejected: "
            f"{bad.error.name}: {bad.message}"
        )
    mms = [r for r in sched.records if r.instruction.op == Op.MM]
    print(
        f"{args.repeat} x nc_matmul {args.dtype} K={k} M={m} N={args.n} on "
        f"{args.tiles} tile(s) of {tile or (args.rows, args.cols)}, {args.rows} x {args.cols} "
        f"array, {args.rules} rules"
    )
    print(f"total: {sched.total_cycles} cycles")
    print(f"steady state: {timing.steady_cycles(sched):.1f} cycles per matmul")
    print(f"first output: cycle {mms[0].outputs[0]}, last output: cycle {mms[-1].outputs[-1]}")
    start, stop = sched.mm_window()
    clock = timing.CLOCK_HZ
    if prog[0].transpose:
        moved = args.repeat * m * args.n  # N output vectors of M lanes each
        print(
            f"transposed: {moved / (stop - start):.1f} elements per cycle (first MM to the last "
            f"MM's end); a transpose does no multiply-accumulates (no utilization or TFLOPS)"
        )
        return _write_trace(args, sched, timing)
    print(
        f"utilization: {sched.utilization(start, stop):.3f} (first MM to the last MM's end), "
        f"{sched.utilization():.3f} (whole run)"
    )
    print(
        f"TFLOPS at {clock / 1e9:.1f} GHz: {sched.tflops(start, stop):.1f} (first MM to the "
        f"last MM's end), {sched.tflops():.1f} (whole run); peak "
        f"{timing.peak_tflops(args.rows, args.cols, prog[0].mode):.1f}"
    )
    return _write_trace(args, sched, timing)


def _write_trace(args, sched, timing):
    import json

    if args.trace:
        from .testbench import progress

        def write(path):
            # Event by event: a long run's trace is never held whole.
            with open(path, "w") as f:
                f.write('{"displayTimeUnit": "ns", "traceEvents": [\n')
                for i, event in enumerate(timing.chrome_trace_events(sched)):
                    f.write((",\n" if i else "") + json.dumps(event))
                f.write("\n]}\n")

        with progress.step(f"writing the trace {args.trace}"):
            write_output(args.trace, "--trace", write)
        print(f"trace: {args.trace} (open in https://ui.perfetto.dev)")
    return 0


def _shortcuts(parser):
    parser.add_argument("--rows", type=int, help="same as --param rows=N")
    parser.add_argument("--cols", type=int, help="same as --param cols=N")
    parser.add_argument("--mode", help="same as --param mode=NAME")


def _blocks_epilog():
    """The blocks and groups, for the help of the commands that take one."""
    lines = ["blocks (ncrtl list shows their parameters):"]
    lines += [f"  {b.name:14s} {b.summary}" for b in blocks.all_blocks()]
    lines.append("groups:")
    for g, members in blocks.GROUPS.items():
        names = ", ".join(sorted({b for b, _ in members}))
        lines.append(f"  {g:14s} {len(members)} configurations of {names}")
    return _wrap(lines)


def _dtypes_epilog():
    """The operations of ``ncrtl sim matmul --dtype`` with their formats and limits, from the
    mode table."""
    from .model.modes import ENGINE_MODES

    lines = [
        "operations (--dtype) on a rows x cols array, K <= rows, M <= cols (--k / --m default "
        "to them):"
    ]
    for m in ENGINE_MODES:
        fmts = (
            ", ".join(m.formats_s)
            if m.formats_s == m.formats_m
            else f"{', '.join(m.formats_s)} x {', '.join(m.formats_m)}"
        )
        notes = [f"formats {fmts}"]
        if len(m.formats_s) > 1:
            notes.append("--format / --moving-format pick them")
        if m.products > 1:
            notes.append(f"K partitions of {m.products} elements")
        if m.k_multiple > 1:
            notes.append(f"K a multiple of {m.k_multiple}")
        if m.m_multiple > 1:
            notes.append(f"M a multiple of {m.m_multiple}")
        n = f"N <= {m.max_n}" + (
            f" ({m.max_n_bf16} into BF16 PSUM)" if m.max_n_bf16 > m.max_n else ""
        )
        notes.append(n)
        if m.beat_interval > 1:
            notes.append(f"1/{m.beat_interval} rate")
        lines.append(f"  {m.name:14s} " + "; ".join(notes))
    ops = [op for op in blocks.TE_MODES if op.startswith("transpose_")]
    lines.append(
        f"  {', '.join(ops)}: the stationary [K, M] moved to [M, N] by a 0/1 selection matrix "
        f"[K, N] (at most one 1 per column); N <= 512"
    )
    lines.append(
        f"MX chain: {', '.join(MX_DTYPES)} (--moving-dtype for the moving side): BF16 [K, 4M] "
        f"x [K, 4N] quantized by the RTL QuantizeMX, then the MX matmul; --rows a multiple of 32"
    )
    lines.append(
        f"with --psum: {', '.join(blocks.CORE_MODES)}; K a multiple of --rows (K / rows "
        f"matmuls accumulated in one group, at most 64), M = --cols; a transpose writes raw "
        f"16-bit words (RAW16) with K = --rows"
    )
    lines.append(
        "--stationary / --moving: .npy files of [K, M] and [K, N] ([K, 2, M] / [K, 2, N] for "
        "double_row) holding numbers (float, signed integer, bool) each exactly a value of the "
        "format, an array of the format's own dtype, or its bit patterns: raw bytes (|V1, |V2, "
        "what np.save writes for an ml_dtypes array) or unsigned integers of the format's width"
    )
    return _wrap(lines)


def _wrap(lines, width=100):
    """Epilog lines wrapped to ``width``, continuation lines indented under their text."""
    import re
    import textwrap

    out = []
    for line in lines:
        # A table row ("  name   text") continues under its text, other lines two spaces in.
        row = re.match(r"  \S+\s{2,}", line)
        indent = " " * (row.end() if row else len(line) - len(line.lstrip()) + 2)
        out.append(textwrap.fill(line, width, subsequent_indent=indent))
    return "\n".join(out)


def _seed_arg(parser):
    parser.add_argument(
        "--seed",
        type=int,
        default=1,
        help=f"seed of the random stimulus and of the stalls, 0..{MAX_SEED} (default 1)",
    )


def _block_args(parser, groups=True):
    """The ``block`` argument (a block, or a group too) and its ``--param``s."""
    if groups:
        parser.add_argument("block", help="a block or a group (below)")
        more = "not with a group"
    else:
        parser.add_argument("block", help="a block name (below; ncrtl list shows their parameters)")
        more = "default: the block's, see ncrtl list"
    parser.add_argument(
        "--param",
        action="append",
        metavar="NAME=VALUE",
        help=f"a block parameter (repeatable; {more})",
    )


def build_parser():
    p = argparse.ArgumentParser(prog="ncrtl", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    raw = argparse.RawDescriptionHelpFormatter

    s = sub.add_parser("list", help="list blocks, their parameters and groups")
    s.set_defaults(func=_cmd_list)

    s = sub.add_parser(
        "verilog", help="write the Verilog of a block", epilog=_blocks_epilog(), formatter_class=raw
    )
    _block_args(s, groups=False)
    s.add_argument(
        "-o",
        "--output",
        default=".",
        help="output folder, created if missing (default: the current folder)",
    )
    _shortcuts(s)
    s.set_defaults(func=_cmd_verilog)

    s = sub.add_parser(
        "lint",
        help="verilator --lint-only -Wall and a Yosys latch check",
        epilog=_blocks_epilog(),
        formatter_class=raw,
    )
    _block_args(s)
    _shortcuts(s)
    s.set_defaults(func=_cmd_lint)

    s = sub.add_parser(
        "conformance",
        help="run hardware vs golden and print a summary",
        epilog=_blocks_epilog(),
        formatter_class=raw,
    )
    _block_args(s)
    s.add_argument(
        "--count",
        type=int,
        default=10000,
        help="size of the random stimulus, >= 1 (default 10000): random vectors per unit for "
        "the FP units; each block says what it runs (exhaustive sets and fixed programs "
        "ignore it) in the first lines of the output",
    )
    _seed_arg(s)
    s.add_argument(
        "--stall",
        type=float,
        default=0.2,
        help="probability of an idle input cycle and of a backpressure cycle, in [0, 1) "
        "(default 0.2)",
    )
    s.add_argument(
        "--junit",
        default="build/conformance.xml",
        help="JUnit XML report path (default build/conformance.xml)",
    )
    s.add_argument(
        "--waves", action="store_true", help="record FST waveforms (same as WAVES=1; default off)"
    )
    _shortcuts(s)
    s.set_defaults(func=_cmd_conformance)

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
        "double_row / MX: partitions of 2 / 4 elements)",
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
        "K, M and N then come from the matrices",
    )
    s.add_argument(
        "--moving",
        metavar="X.npy",
        help="your moving matrix [K, N] (.npy), with --stationary",
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
    _seed_arg(s)
    s.add_argument(
        "--waves", action="store_true", help="record FST waveforms (same as WAVES=1; default off)"
    )
    s.set_defaults(func=_cmd_sim)

    s = sub.add_parser(
        "timing",
        help="figures of back-to-back nc_matmuls from the timing model alone (no RTL)",
    )
    s.add_argument("what", help="what to time: matmul")
    s.add_argument(
        "--k",
        type=int,
        help="contraction rows K, 1..tile rows (default: the tile's rows, --rows without "
        "--tile-size)",
    )
    s.add_argument(
        "--m",
        type=int,
        help="stationary free size M, 1..tile columns (default: the tile's columns)",
    )
    s.add_argument(
        "--n",
        type=int,
        default=512,
        help="moving free size N, 1..512 (MX with --bf16-out: 1..1024; default 512)",
    )
    s.add_argument(
        "--bf16-out",
        action="store_true",
        help="the matmuls accumulate into a BF16 PSUM tile (NKI: the destination's dtype), "
        "which lets MX take N up to 1024 (default: FP32)",
    )
    s.add_argument(
        "--dtype",
        default="bf16",
        metavar="OPERATION",
        help=f"a mode's matmul or transpose (default bf16): {', '.join(blocks.TE_MODES)}",
    )
    s.add_argument(
        "--repeat", type=int, default=16, help="nc_matmuls back to back, >= 1 (default 16)"
    )
    s.add_argument(
        "--tile-size",
        metavar="ROWS,COLS",
        help="tile of each matmul (default: the whole array), e.g. 32,128 for row tiles",
    )
    s.add_argument(
        "--tiles",
        type=int,
        default=1,
        help="spread the matmuls over this many different tiles of --tile-size, 1..the tiles "
        "of the array (default 1)",
    )
    s.add_argument(
        "--rows",
        type=int,
        default=128,
        help=f"array rows, 1..{isa.MAX_ARRAY} (default 128, the hardware's)",
    )
    s.add_argument(
        "--cols",
        type=int,
        default=128,
        help=f"array columns, 1..{isa.MAX_ARRAY} (default 128, the hardware's)",
    )
    s.add_argument(
        "--tile-unit",
        type=int,
        default=32,
        help="the smallest tile, >= 1 (default 32, the hardware's)",
    )
    s.add_argument(
        "--rules",
        choices=("documented", "hdl", "hdl-parallel", "hdl-background", "one-chain"),
        default="documented",
        help="documented: the vendor's timing (default); hdl: the RTL's default engine (tiles "
        "one after another, no background transpose); hdl-parallel: the RTL with "
        "parallel_tiles (tiles side by side, no background transpose); hdl-background: the "
        "RTL with background_transpose (tiles one after another); one-chain: an LS a "
        "column per beat and a 64-cycle MM floor",
    )
    s.add_argument(
        "--trace",
        metavar="FILE",
        help="write a Chrome / Perfetto trace (JSON) to FILE (default: none)",
    )
    s.set_defaults(func=_cmd_timing)

    s = sub.add_parser("bench", help="benchmarks: generation, build and simulation speed")
    s.add_argument(
        "--count",
        type=int,
        default=200000,
        help="vectors per FP unit for the throughput (default 200000)",
    )
    s.add_argument(
        "--only",
        choices=("pe", "fp", "harness", "te", "bands", "psum", "dma"),
        help="run one section: pe (the PE in a C++ loop), fp (the FP units), harness (the "
        "testbench against a C++ loop), te (the Tensor Engine), bands (the Tensor Engine as "
        "column bands on threads against one model; only when named), psum or dma (the DMA "
        "engine's bandwidth) (default: all of them but bands)",
    )
    s.add_argument(
        "--pe-cycles",
        type=int,
        default=20000,
        help="tile cycles per operation of the PE measurement (default 20000)",
    )
    s.add_argument(
        "--dma-partitions",
        type=int,
        default=16,
        help="SBUF partitions of the DMA bandwidth measurement, 1..128 (default 16)",
    )
    s.add_argument(
        "--psum-partitions",
        type=int,
        default=128,
        help="PSUM partitions to measure, 8 banks x 2 KiB, 0..128 (default 128; 0 skips it)",
    )
    s.add_argument(
        "--psum-count",
        type=int,
        default=1000,
        help="random Tensor Engine beats of the PSUM program, >= 1 (default 1000)",
    )
    s.add_argument(
        "--te-size",
        type=int,
        default=128,
        help="Tensor Engine array size to measure, 2..128 (default 128, about 15 minutes; "
        "0 skips it)",
    )
    s.add_argument(
        "--pe-modes",
        default="all",
        help="PE builds to measure, comma-separated, each in turn: all (default, every mode), "
        "a family (bf16, fp8, fp32, mx) or modes joined by '+'; --only te: each must serve "
        "bf16 (the measured matmul); --only pe: each build's operations",
    )
    s.add_argument(
        "--bands",
        type=int,
        default=4,
        help="--only bands: column bands the grid is cut into (default 4; dividing --te-size, "
        "each dividing the 32-column LoadStationary chain or holding whole chains)",
    )
    s.add_argument(
        "--band-threads",
        default=None,
        help="--only bands: thread counts to measure, comma-separated (default 1, 2, 4, ... "
        "up to the cores of this machine)",
    )
    s.add_argument(
        "--pgo",
        action="store_true",
        help="--only te: measure the profile-guided builds (pe_array --param pgo=1: compiled "
        "twice with a training run between, about twice the build time) instead of the plain "
        "ones",
    )
    s.add_argument(
        "--harness-size",
        type=int,
        default=16,
        help="engine size of the testbench-against-C++-loop measurement, 2..128 (default 16; "
        "0 skips it)",
    )
    s.add_argument(
        "--harness-repeat",
        type=int,
        default=40,
        help="bf16 matmuls (K = M = size, N = 512) it streams back to back, >= 1 (default 40)",
    )
    s.set_defaults(func=_cmd_bench)
    return p


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (UsageError, blocks.BlockError, OutputError) as exc:
        print(f"ncrtl: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
