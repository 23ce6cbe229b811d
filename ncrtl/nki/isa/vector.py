"""The Vector, Scalar and GpSimd engines' element-wise instructions: ``tensor_copy``,
``memset``, ``tensor_tensor``, ``tensor_scalar``, ``scalar_tensor_tensor``, ``activation``
(with its accumulator registers), ``activation_reduce``, ``activate2``, ``exponential``,
``reciprocal`` and ``quantize_mx``.  The arithmetic is the golden's
(:mod:`ncrtl.model.kernel.ops.elementwise`); the rules each call checks and the costs are
docs/nki/arith.md's."""

from __future__ import annotations

import numpy as np

from ncrtl.model.kernel.dtypes import dtype_of
from ncrtl.model.kernel.values import (
    ACTIVATIONS,
    ALU_OPS,
    BITVEC_OPS,
    BITVEC_UNARY,
    INT_OPS,
    UNARY_OPS,
)

from .._trace import NkiTensor, current, fail
from .enums import engine, reduce_cmd
from .operands import (
    at_most_one_psum,
    emit,
    free_size,
    op_name,
    operand,
    pick_engine,
    same_layout,
)

__all__ = [
    "tensor_copy",
    "memset",
    "tensor_tensor",
    "tensor_scalar",
    "scalar_tensor_tensor",
    "activation",
    "activation_reduce",
    "activate2",
    "exponential",
    "reciprocal",
    "quantize_mx",
]

#: ``nl.max`` / ``nl.min`` (the language's reductions) name the operators maximum / minimum
ALIASES = {"max": "maximum", "min": "minimum"}


def alu_op(call, what, op, table):
    """The operator name of ``op`` in ``table`` (``nl.max`` read as maximum); ``abs_max`` and
    ``abs_min`` only on NeuronCore-v4 (the reference's note)."""
    name = op_name(call, what, op, {**table, **{a: 0 for a, n in ALIASES.items() if n in table}})
    name = ALIASES.get(name, name)
    if name in ("abs_max", "abs_min"):
        core = current(call).core.name
        if core != "v4":
            fail(call, f"{what}=nl.{name} needs NeuronCore-v4, the kernel targets {core}")
    return name


def is_int(t):
    d = dtype_of(t.dtype)
    return d.fmt is None and d.packed == 1


def need_ints(call, op, *named):
    for what, t in named:
        if not is_int(t):
            fail(
                call,
                f"{what} {t.name} is {t.dtype}: the bitvec operator nl.{op} takes integer tiles",
            )


def cmd_name(call, value, allowed):
    """``reduce_cmd`` as its name, one of ``allowed``."""
    try:
        name = value.name if isinstance(value, reduce_cmd) else reduce_cmd(value).name
    except (ValueError, TypeError):
        name = value if isinstance(value, str) and value in reduce_cmd.__members__ else None
    if name not in allowed:
        fail(call, f"reduce_cmd={value!r}: this instruction takes {', '.join(allowed)}")
    return name


def scalar_operand(call, what, value, srcs, p=None, dtypes=None, integer=False):
    """A number, or a ``[P, 1]`` tensor appended to ``srcs`` (its dtype one of ``dtypes``)."""
    if value is None:
        return None
    if isinstance(value, NkiTensor):
        if free_size(value) != 1 or (p is not None and value.shape[0] != p):
            want = f"[{p}, 1]" if p is not None else "[P, 1]"
            fail(call, f"{what} {list(value.shape)} must be a number or a {want} tensor")
        if dtypes is not None and value.dtype not in dtypes:
            fail(call, f"{what} {value.name} is {value.dtype}; it must be {' or '.join(dtypes)}")
        srcs.append(operand(call, what, value, ("sbuf", "psum")))
        return {"tensor": len(srcs) - 1}
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        if integer:
            if float(value) != int(value):
                fail(call, f"{what}={value!r}: a bitvec operand is an integer")
            return int(value)
        return float(value)
    fail(call, f"{what} must be a number or a [P, 1] tensor, not {value!r}")


def reduce_res_operand(call, t, p):
    if t is None:
        return None
    r = operand(call, "reduce_res", t, ("sbuf", "psum"))
    if t.shape[0] != p or free_size(t) != 1:
        fail(call, f"reduce_res {list(t.shape)} must be [{p}, 1] (one element per partition)")
    return r


_FP8 = ("float8_e4m3", "float8_e4m3fn", "float8_e5m2", "float8_e3m4")
#: dtype= of tensor_copy -> the dst dtypes that hold each of its values exactly
EXACT_IN = {
    "bfloat16": ("float32",),
    "float16": ("float32",),
    "tfloat32": ("float32",),
    **{f: ("float32", "bfloat16", "float16") for f in _FP8},
    "int8": ("int16", "int32", "float32", "bfloat16", "float16"),
    "uint8": ("uint16", "int16", "uint32", "int32", "float32", "bfloat16", "float16"),
    "int16": ("int32", "float32"),
    "uint16": ("uint32", "int32", "float32"),
}


def tensor_copy(dst, src, engine=engine.unknown, name=None, dtype=None):
    """Copy an on-chip tensor into another, converting to ``dst``'s dtype (PSUM -> SBUF
    eviction).  ``dtype=`` (the public kernels pass it) names the conversion's target: the
    values are rounded to it, then stored in ``dst``'s dtype, which must be it or hold each of
    its values exactly (a wider type)."""
    call = "nisa.tensor_copy"
    which = pick_engine(call, engine, ("vector", "scalar", "gpsimd"), "vector")
    s = operand(call, "src", src, ("sbuf", "psum"))
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    if which == "gpsimd" and "psum" in (src._decl.space, dst._decl.space):
        fail(call, "the GpSimd engine cannot access PSUM")
    if which == "scalar" and current(call).core.name == "v2":
        fail(call, "NeuronCore-v2's Scalar Engine has no tensor_copy (nisa.activation, nl.copy)")
    args = {}
    if dtype is not None:
        try:
            want = dtype_of(dtype).name
        except ValueError as e:
            fail(call, f"dtype={dtype!r}: {e}")
        if want != dst.dtype:
            if dst.dtype not in EXACT_IN.get(want, ()):
                fail(
                    call,
                    f"dtype={want} and dst {dst.name}'s dtype {dst.dtype} differ, and {dst.dtype} "
                    f"does not hold every {want} value: the copy rounds to dtype, then stores "
                    f"in dst's dtype",
                )
            args["via"] = want
    same_layout(call, dst, ("src", src))
    emit(which, "tensor_copy", [d], [s], args, call)


def memset(dst, value, engine=engine.unknown, name=None):
    """Fill ``dst`` with a constant."""
    call = "nisa.memset"
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    default = "gpsimd" if dst._decl.space == "sbuf" else "vector"
    which = pick_engine(call, engine, ("vector", "gpsimd"), default)
    if which == "gpsimd" and dst._decl.space == "psum":
        fail(call, "the GpSimd engine cannot access PSUM")
    if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool):
        fail(call, f"value must be a number known when the kernel is traced, not {value!r}")
    if dtype_of(dst.dtype).packed != 1 and value != 0:
        fail(call, f"a packed {dst.dtype} tensor can only be set to 0")
    emit(which, "memset", [d], [], {"value": float(value)}, call)


def tensor_tensor(dst, data1, data2, op, engine=engine.unknown, name=None):
    """``dst = op(data1, data2)`` elementwise: float32 arithmetic, bitvec operators on integer
    bits, native integer arithmetic on GpSimd for int32 / uint32 tiles."""
    call = "nisa.tensor_tensor"
    opname = alu_op(call, "op", op, {**ALU_OPS, **BITVEC_OPS})
    a = operand(call, "data1", data1, ("sbuf", "psum"))
    b = operand(call, "data2", data2, ("sbuf", "psum"))
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    at_most_one_psum(call, data1, data2)
    same_layout(call, dst, ("data1", data1), ("data2", data2))
    tiles = (data1, data2, dst)
    in_psum = any(t._decl.space == "psum" for t in tiles)
    ints32 = all(t.dtype in ("int32", "uint32") for t in tiles)
    if opname == "power":
        which = pick_engine(call, engine, ("vector", "scalar", "gpsimd"), "gpsimd")
        if which != "gpsimd":
            fail(call, f"nl.power runs on the GpSimd engine, not engine={which}")
    else:
        default = "gpsimd" if ints32 and not in_psum else "vector"
        which = pick_engine(call, engine, ("vector", "gpsimd"), default)
    if which == "gpsimd" and in_psum:
        fail(call, f"the GpSimd engine{' (nl.power)' * (opname == 'power')} cannot access PSUM")
    if opname in BITVEC_OPS:
        need_ints(call, opname, ("data1", data1), ("data2", data2), ("dst", dst))
        mode = "bitvec"
    elif which == "gpsimd" and ints32 and opname in INT_OPS:
        mode = "int"
    else:
        mode = "float"
    emit(which, "tensor_tensor", [d], [a, b], {"op": opname, "mode": mode}, call)


#: The Scalar Engine's tensor_scalar operator pairs before NeuronCore-v4 (the reference's trn2
#: list)
SCALAR_PAIRS = (("multiply", "add"), ("multiply", None), ("add", None))


def tensor_scalar(
    dst,
    data,
    op0,
    operand0,
    reverse0=False,
    op1=None,
    operand1=None,
    reverse1=False,
    engine=engine.unknown,
    name=None,
):
    """``dst = (data op0 operand0) op1 operand1``, operands numbers or ``[P, 1]`` tensors."""
    call = "nisa.tensor_scalar"
    table = {**ALU_OPS, **UNARY_OPS, **BITVEC_OPS, **BITVEC_UNARY}
    n0 = alu_op(call, "op0", op0, table)
    n1 = None if op1 is None else alu_op(call, "op1", op1, table)
    bitvec = n0 in BITVEC_OPS or n0 in BITVEC_UNARY
    if n1 is not None and (n1 in BITVEC_OPS or n1 in BITVEC_UNARY) != bitvec:
        fail(call, f"op0=nl.{n0} and op1=nl.{n1}: both bitvec or both arithmetic")
    if n1 is None and operand1 is not None:
        fail(call, "operand1 is given without op1 (both None when unused)")
    which = pick_engine(call, engine, ("vector", "scalar", "gpsimd"), "vector")
    srcs = [operand(call, "data", data, ("sbuf", "psum"))]
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    same_layout(call, dst, ("data", data))
    if which == "gpsimd" and "psum" in (data._decl.space, dst._decl.space):
        fail(call, "the GpSimd engine cannot access PSUM")
    if bitvec:
        if which != "vector":
            fail(call, f"bitvec operators run on the Vector Engine, not engine={which}")
        need_ints(call, n0, ("data", data), ("dst", dst))
    elif which == "scalar" and current(call).core.name != "v4" and (n0, n1) not in SCALAR_PAIRS:
        core = current(call).core.name
        pairs = ", ".join(f"({a}, {b})" for a, b in SCALAR_PAIRS)
        fail(
            call, f"the Scalar Engine on {core} takes the operator pairs {pairs}; not ({n0}, {n1})"
        )
    args = {"op0": n0, "reverse0": bool(reverse0), "op1": n1, "reverse1": bool(reverse1)}
    p = data.shape[0]
    for k, (n, value) in enumerate(((n0, operand0), (n1, operand1))):
        what = f"operand{k}"
        if n is None:
            args[what] = None
        elif n in UNARY_OPS or n in BITVEC_UNARY:
            if value not in (None, 0, 0.0):
                fail(call, f"{what} must be None or 0 with the unary operator nl.{n}")
            args[what] = None
        elif value is None:
            fail(call, f"{what} is None: nl.{n} takes a number or a [{p}, 1] tensor")
        else:
            dtypes = None if bitvec else ("float32",)
            args[what] = scalar_operand(call, what, value, srcs, p, dtypes, integer=bitvec)
    args["bitvec"] = bitvec
    emit(which, "tensor_scalar", [d], srcs, args, call)


def scalar_tensor_tensor(
    dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, name=None
):
    """``dst = (data op0 operand0) op1 operand1`` on the Vector Engine: ``operand0`` a number
    or a ``[P, 1]`` tensor, ``operand1`` a tile of ``data``'s layout."""
    call = "nisa.scalar_tensor_tensor"
    n0 = alu_op(call, "op0", op0, ALU_OPS)
    n1 = alu_op(call, "op1", op1, ALU_OPS)
    p = data.shape[0] if isinstance(data, NkiTensor) else None
    srcs = [operand(call, "data", data, ("sbuf", "psum"))]
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    same_layout(call, dst, ("data", data))
    if operand0 is None:
        fail(call, f"operand0 is None: nl.{n0} takes a number or a [{p}, 1] tensor")
    args = {"op0": n0, "op1": n1, "reverse0": bool(reverse0), "reverse1": bool(reverse1)}
    args["operand0"] = scalar_operand(call, "operand0", operand0, srcs, p)
    o1 = operand(call, "operand1", operand1, ("sbuf", "psum"))
    same_layout(call, dst, ("operand1", operand1))
    at_most_one_psum(call, data, operand1)
    srcs.append(o1)
    args["operand1"] = {"tensor": len(srcs) - 1}
    emit("vector", "scalar_tensor_tensor", [d], srcs, args, call)


#: ``reduce_op`` of ``activation`` / ``activation_reduce`` (the reference: nl.add) and of
#: ``activate2``
ACTIVATION_REDUCE = ("add",)
ACTIVATE2_REDUCE = ("add", "maximum", "minimum", "abs_max", "abs_min")


def _activation_operands(call, data, bias, scale, srcs):
    p = data.shape[0]
    sc = scalar_operand(call, "scale", scale, srcs, p, ("float32",))
    if sc is None:
        fail(call, "scale must be a number or a [P, 1] float32 tensor, not None")
    if bias is not None and not isinstance(bias, NkiTensor) and current(call).core.name == "v2":
        fail(call, f"bias={bias!r}: NeuronCore-v2 takes a [{p}, 1] bias tensor, not a number")
    if isinstance(bias, NkiTensor) and bias.dtype == "tfloat32":
        fail(call, "bias is tfloat32: any dtype but tfloat32")
    return sc, scalar_operand(call, "bias", bias, srcs, p)


def _reduce_op(call, reduce_op, legal):
    if reduce_op is None:
        return "add"
    name = alu_op(call, "reduce_op", reduce_op, {**ALU_OPS, **BITVEC_OPS})
    if name not in legal:
        fail(call, f"reduce_op=nl.{name}: this instruction reduces with {', '.join(legal)}")
    return name


def _read_accumulator(call, which, res, p):
    """The instruction that reads the engine's accumulator registers into ``reduce_res``."""
    r = reduce_res_operand(call, res, p)
    if r is not None:
        emit(which, "accumulator_read", [r], [], {}, call)


def activation(
    dst,
    op,
    data,
    bias=None,
    scale=1.0,
    reduce_op=None,
    reduce_res=None,
    reduce_cmd=reduce_cmd.idle,
    name=None,
):
    """``dst = op(data * scale + bias)`` on the Scalar Engine (float32); ``reduce_cmd`` drives
    the engine's accumulator registers, ``reduce_res`` reads them out (a second
    instruction)."""
    call = "nisa.activation"
    opname = op_name(call, "op", op, ACTIVATIONS)
    cmd = cmd_name(call, reduce_cmd, ("idle", "reset", "reduce", "reset_reduce"))
    rop = _reduce_op(call, reduce_op, ACTIVATION_REDUCE)
    srcs = [operand(call, "data", data, ("sbuf", "psum"))]
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    same_layout(call, dst, ("data", data))
    sc, b = _activation_operands(call, data, bias, scale, srcs)
    args = {"op": opname, "scale": sc, "bias": b, "reduce_op": rop, "reduce_cmd": cmd}
    emit("scalar", "activation", [d], srcs, args, call)
    _read_accumulator(call, "scalar", reduce_res, data.shape[0])


def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
    """``nisa.activation`` with ``reduce_cmd=reset_reduce``: the reduction of this
    instruction's results into ``reduce_res``."""
    call = "nisa.activation_reduce"
    opname = op_name(call, "op", op, ACTIVATIONS)
    rop = _reduce_op(call, reduce_op, ACTIVATION_REDUCE)
    srcs = [operand(call, "data", data, ("sbuf", "psum"))]
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    same_layout(call, dst, ("data", data))
    sc, b = _activation_operands(call, data, bias, scale, srcs)
    args = {"op": opname, "scale": sc, "bias": b, "reduce_op": rop, "reduce_cmd": "reset_reduce"}
    emit("scalar", "activation", [d], srcs, args, call)
    _read_accumulator(call, "scalar", reduce_res, data.shape[0])


#: activate2's (op0, op1) pairs (the reference's six)
ACTIVATE2_PAIRS = (
    ("multiply", "add"),
    ("multiply", "subtract"),
    ("multiply", "bypass"),
    ("add", "bypass"),
    ("subtract", "bypass"),
    ("bypass", "bypass"),
)


def activate2(
    dst,
    op,
    data,
    imm0,
    imm1,
    op0,
    op1,
    relu_param=0.0,
    reverse0=False,
    reverse1=False,
    reduce_op=None,
    reduce_res=None,
    reduce_cmd=reduce_cmd.idle,
    name=None,
):
    """NeuronCore-v4's Scalar Engine pipeline: ``(data op0 imm0) op1 imm1``, then ``op``
    (``relu_param`` its slope where it takes one), then the accumulator registers."""
    call = "nisa.activate2"
    core = current(call).core.name
    if core != "v4":
        fail(call, f"activate2 needs NeuronCore-v4, the kernel targets {core}")
    opname = op_name(call, "op", op, ACTIVATIONS)
    n0 = "bypass" if op0 is None else alu_op(call, "op0", op0, ALU_OPS)
    n1 = "bypass" if op1 is None else alu_op(call, "op1", op1, ALU_OPS)
    if (n0, n1) not in ACTIVATE2_PAIRS:
        pairs = ", ".join(f"({a}, {b})" for a, b in ACTIVATE2_PAIRS)
        fail(call, f"(op0, op1) = ({n0}, {n1}); activate2 takes {pairs}")
    if reverse0 and n0 == "bypass":
        fail(call, "reverse0 needs op0")
    if reverse1 and n1 == "bypass":
        fail(call, "reverse1 needs op1")
    cmd = cmd_name(call, reduce_cmd, ("idle", "reset", "reduce", "reset_reduce"))
    rop = _reduce_op(call, reduce_op, ACTIVATE2_REDUCE)
    p = data.shape[0] if isinstance(data, NkiTensor) else None
    srcs = [operand(call, "data", data, ("sbuf", "psum"))]
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    same_layout(call, dst, ("data", data))
    if isinstance(imm0, NkiTensor) and isinstance(imm1, NkiTensor) and imm0.dtype != imm1.dtype:
        fail(call, f"imm0 ({imm0.dtype}) and imm1 ({imm1.dtype}) tensors must share a dtype")
    args = {"op": opname, "op0": n0, "op1": n1, "reduce_op": rop, "reduce_cmd": cmd}
    args |= {"reverse0": bool(reverse0), "reverse1": bool(reverse1)}
    for what, value, n in (("imm0", imm0, n0), ("imm1", imm1, n1)):
        if value is None and n != "bypass":
            fail(call, f"{what} is None: nl.{n} takes a number or a [{p}, 1] tensor")
        args[what] = scalar_operand(call, what, 0.0 if value is None else value, srcs, p)
    args["alpha"] = scalar_operand(call, "relu_param", relu_param, srcs, p)
    emit("scalar", "activate2", [d], srcs, args, call)
    _read_accumulator(call, "scalar", reduce_res, p)


_EXP_DST = ("float8_e4m3", "float8_e5m2", "float16", "bfloat16", "float32", "tfloat32")
_EXP_DST += ("int8", "int16", "int32", "uint8", "uint16")
_EXP_SRC = ("float8_e4m3", "float8_e5m2", "float16", "bfloat16", "float32")
_EXP_SRC += ("int8", "int16", "int32", "uint8", "uint16", "uint32")
_EXP_RES = ("float8_e4m3", "float8_e5m2", "float16", "bfloat16", "float32", "tfloat32")


def exponential(
    dst,
    src,
    max_value=0.0,
    reduce_res=None,
    reduce_cmd=reduce_cmd.idle,
    reduce_init=0.0,
    name=None,
):
    """NeuronCore-v4's Vector Engine ``dst = exp(src - max_value)``, its sum kept in the
    engine's accumulator registers by ``reduce_cmd`` (4x ``activation(exp)``'s rate)."""
    call = "nisa.exponential"
    core = current(call).core.name
    if core != "v4":
        fail(call, f"exponential needs NeuronCore-v4, the kernel targets {core}")
    cmd = cmd_name(call, reduce_cmd, ("idle", "reset_reduce", "reduce", "load_reduce"))
    srcs = [operand(call, "src", src, ("sbuf", "psum"))]
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    same_layout(call, dst, ("src", src))
    for what, t, legal in (("src", src, _EXP_SRC), ("dst", dst, _EXP_DST)):
        if t.dtype not in legal:
            fail(call, f"{what} is {t.dtype}; it must be one of {', '.join(legal)}")
        if len(t.shape) > 4:
            fail(call, f"{what} {list(t.shape)} has more than 4 dimensions")
    p = src.shape[0]
    if cmd != "load_reduce" and not (
        reduce_init is None or (not isinstance(reduce_init, NkiTensor) and reduce_init == 0)
    ):
        fail(call, f"reduce_init={reduce_init!r} without reduce_cmd=load_reduce (0.0 or unset)")
    args = {"reduce_cmd": cmd}
    args["max_value"] = scalar_operand(call, "max_value", max_value, srcs, p, ("float32",))
    if args["max_value"] is None:
        args["max_value"] = 0.0
    if cmd == "load_reduce":
        init = 0.0 if reduce_init is None else reduce_init
        args["reduce_init"] = scalar_operand(call, "reduce_init", init, srcs, p, ("float32",))
    dsts = [d]
    r = reduce_res_operand(call, reduce_res, p)
    if r is not None:
        if reduce_res.dtype not in _EXP_RES:
            fail(call, f"reduce_res is {reduce_res.dtype}; it must be one of {', '.join(_EXP_RES)}")
        dsts.append(r)
    emit("vector", "exponential", dsts, srcs, args, call)


def reciprocal(dst, data, name=None):
    """``dst = 1 / data`` on the Vector Engine (float32; 8 cycles an element)."""
    call = "nisa.reciprocal"
    s = operand(call, "data", data, ("sbuf", "psum"))
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    same_layout(call, dst, ("data", data))
    emit("vector", "reciprocal", [d], [s], {}, call)


def quantize_mx(dst, src, dst_scale, name=None):
    """QuantizeMX (NeuronCore-v4, Vector Engine): BF16/FP16 ``src [P, F]`` to ``_x4`` data
    ``[P, F/4]`` and E8M0 scales."""
    call = "nisa.quantize_mx"
    tr = current(call)
    if tr.core.name != "v4":
        fail(call, f"QuantizeMX needs NeuronCore-v4, the kernel targets {tr.core.name}")
    s = operand(call, "src", src, ("sbuf",))
    d = operand(call, "dst", dst, ("sbuf",))
    sc = operand(call, "dst_scale", dst_scale, ("sbuf",))
    if dtype_of(dst.dtype).packed != 4 or dtype_of(dst.dtype).itemsize != 4:
        fail(call, f"dst dtype {dst.dtype} must be float8_e4m3fn_x4 or float8_e5m2_x4")
    if src.dtype not in ("bfloat16", "float16"):
        fail(call, f"src dtype {src.dtype} must be bfloat16 or float16")
    p, f = src.shape[0], free_size(src)
    if p % 32 or f % 4:
        fail(call, f"src {list(src.shape)}: P must be a multiple of 32 and F of 4")
    if dst.shape[0] != p or free_size(dst) != f // 4:
        fail(call, f"dst {list(dst.shape)} must be [{p}, {f // 4}]")
    if dst_scale.shape[0] != p or free_size(dst_scale) != f // 4:
        fail(
            call,
            f"dst_scale {list(dst_scale.shape)} must be [{p}, {f // 4}] (scales in their quadrants)",
        )
    emit("vector", "quantize_mx", [d, sc], [s], {}, call)
