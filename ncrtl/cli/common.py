"""What every command shares: the usage error, seeds, stalls, block parameters and the
block arguments of the parsers."""

import math

from .. import blocks
from ..model.modes import MX_DTYPES, SPARSE_GROUP, SPARSE_RATIOS
from ..testbench.progress import say_pe_build


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit status 2."""


#: Seeds every command takes: the testbenches seed numpy, Python's ``random`` and the Verilog
#: stream players' 32-bit generators with them.
MAX_SEED = (1 << 32) - 1


def _check_seed(seed):
    if not 0 <= seed <= MAX_SEED:
        raise UsageError(f"--seed {seed} must be in 0..{MAX_SEED} (an unsigned 32-bit seed)")


#: ``--sparse``: the M:N patterns and their compression ratios (4:8 -> 2, 4:12 -> 3, 4:16 -> 4).
SPARSE_PATTERNS = {f"{SPARSE_GROUP}:{SPARSE_GROUP * r}": r for r in SPARSE_RATIOS}


def sparse_ratio(pattern):
    """The compression ratio of ``--sparse M:N`` (``ncrtl timing`` and ``ncrtl sim``)."""
    ratio = SPARSE_PATTERNS.get(pattern)
    if ratio is None:
        raise UsageError(
            f"--sparse {pattern!r} is not an M:N pattern of the Tensor Engine; allowed: "
            f"{', '.join(SPARSE_PATTERNS)}"
        )
    return ratio


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


def _expand(name, param_items, args=None, *, run=False):
    """A block or a group -> list of (block, resolved params).

    A name that is both a group and a block (``psum``) means the group, or the block when
    parameters are given.  ``run``: the parameters of a simulation: one block built for part of
    the mode table gets the narrowest PE build serving its run (:meth:`Block.resolve_run`),
    said in one line (:func:`say_pe_build`); a group's configurations are built as listed."""
    user = _parse_params(param_items, args)
    is_block = name in {b.name for b in blocks.all_blocks()}
    if name in blocks.GROUPS and not (user and is_block):
        if user:
            raise UsageError(f"--param is not accepted with the group {name!r}; name one block")
        return [(blocks.get(b), blocks.get(b).resolve(p)) for b, p in blocks.GROUPS[name]]
    b = blocks.get(name)
    if not run:
        return [(b, b.resolve(user))]
    params, why = b.resolve_run(user)
    b.check_program(params)  # a program the design cannot run: refused before the line below
    say_pe_build(why, "--param pe_modes=...")
    return [(b, params)]


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


def _dtypes_epilog():
    """The operations of ``ncrtl sim matmul --dtype`` with their formats and limits, from the
    mode table."""
    from ..model.modes import ENGINE_MODES

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
        f"--sparse {'|'.join(SPARSE_PATTERNS)}: "
        f"{', '.join(m.name for m in ENGINE_MODES if m.sparse)}; K the compressed rows, a "
        f"multiple of 4 (a dense contraction of K x R rows, R = 2, 3, 4), N <= 512; the "
        f"engine with the sparse path (--rows a multiple of 4); --stationary dense [K x R, M] "
        f"(--mask) or compressed [K, M] (--tags), --moving [K x R, N] or [K, R, N]"
    )
    lines.append(
        "--stationary / --moving: .npy files of [K, M] and [K, N] ([K, 2, M] / [K, 2, N] for "
        "double_row) holding numbers (float, signed integer, bool) each exactly a value of the "
        "format, an array of the format's own dtype, or its bit patterns: raw bytes (|V1, |V2, "
        "what np.save writes for an ml_dtypes array) or unsigned integers of the format's width"
    )
    return _wrap(lines)


def npy_header(path, flag):
    """``(shape, dtype)`` of the array in the ``.npy`` file ``path`` given by ``flag``, read
    from its header alone (what a check can afford for a file of any size); one line naming
    the flag and the file when it is not one readable array."""
    import os

    import numpy as np

    fmt = np.lib.format
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
            if magic[:2] == b"PK":
                raise UsageError(
                    f"{flag} {path}: an .npz archive; give one array saved with np.save"
                )
            if magic != b"\x93NUMPY":
                raise UsageError(
                    f"{flag} {path}: not a .npy file (it does not begin with the .npy header; a "
                    f"text or other file named .npy?): save the array with np.save"
                )
            f.seek(0)
            version = fmt.read_magic(f)
            read = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}
            if version not in read:
                raise ValueError(f".npy format version {version[0]}.{version[1]}")
            shape, _, dtype = read[version](f)
            start = f.tell()
        size = os.path.getsize(path)
    except FileNotFoundError:
        raise UsageError(f"{flag} {path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{flag} {path}: a folder, not a .npy file") from None
    except (ValueError, OSError, EOFError) as exc:
        raise UsageError(f"{flag} {path}: not a readable .npy array ({exc})") from None
    if dtype.hasobject:
        raise UsageError(f"{flag} {path}: a .npy of Python objects; give an array of numbers")
    nbytes = math.prod(shape) * dtype.itemsize
    if start + nbytes > size:
        raise UsageError(
            f"{flag} {path}: not a readable .npy array (its header promises {nbytes:,} bytes "
            f"of data, the file holds {size - start:,}: cut short?)"
        )
    return shape, dtype


def load_npy(path, flag):
    """The array in the ``.npy`` file ``path`` given by ``flag``; one line naming the flag and
    the file when it is not one readable array (:func:`npy_header`)."""
    import numpy as np

    npy_header(path, flag)
    try:
        arr = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise UsageError(f"{flag} {path}: not a readable .npy array ({exc})") from None
    if not isinstance(arr, np.ndarray):
        raise UsageError(f"{flag} {path}: an .npz archive; give one array saved with np.save")
    return arr
