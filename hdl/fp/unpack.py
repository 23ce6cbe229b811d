"""Combinational decoder of the datapath number formats."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.params import check_formats, format_names, validated_init

from .exact import ExactLayout

__all__ = ["Unpack", "exp_field_range", "unpack_geometry"]


def exp_field_range(fmt):
    """``(lo, hi)`` of the LSB exponent :class:`Unpack` can output for ``fmt`` (all encodings).

    Finite values of ``fmt`` have LSB exponents in ``[fmt.lsb_exp_min, fmt.emax - fmt.man_bits]``;
    the IEEE / E8M0 all-ones exponent field (Inf / NaN) decodes one step above that.
    """
    top_field = (1 << fmt.exp_bits) - 1
    lo = (0 if fmt.special == "e8m0" else 1) - fmt.bias - fmt.man_bits
    return lo, top_field - fmt.bias - fmt.man_bits


def unpack_geometry(formats):
    """``(in_width, sig_width, exp_range)`` of an :class:`Unpack` of these (validated) formats.

    Lets a parent size its signals without instantiating (and then discarding) a decoder.
    """
    in_width = max(f.container_bits for f in formats)
    sig_width = max(f.precision for f in formats)
    lo = min(exp_field_range(f)[0] for f in formats)
    hi = max(exp_field_range(f)[1] for f in formats)
    return in_width, sig_width, range(lo, hi + 1)


class Unpack(wiring.Component):
    """Decode an encoding of one of several number formats into sign, exponent and significand.

    A finite encoding decodes *exactly* to ``(-1)**sign * sig * 2**exp`` of ``o_value`` (the
    decomposition of :func:`ncrtl.model.fp.codec.decode_fields`): ``sig`` is the integer
    significand with the implicit bit included for normals, ``exp`` the exponent of its least
    significant bit.  Subnormals decode with the minimum exponent and no implicit bit; zeros
    decode to ``sig = 0``.
    The parameters of every format come from :data:`ncrtl.model.fp.formats.FORMATS`.

    TF32 (``ignored_low_bits = 13``) masks the low 13 mantissa bits of its FP32 container before
    decoding, so an FP32 NaN whose payload lies only in those bits decodes as Inf (as the golden
    model does).  E8M0 decodes to ``2**(bits - 127)`` (``o_sig = 1``) with ``0xFF`` NaN.

    Parameters
    ----------
    formats : list of str or Format
        The formats this decoder understands.  With more than one, ``i_fmt`` selects one at run
        time by its index in the list (out-of-range indices decode as ``formats[0]``).

    Attributes
    ----------
    formats : list of Format
    in_width : int
        Width of ``i_bits``: the widest container of the listed formats.  Narrower formats read
        the low bits of ``i_bits`` (the upper bits are ignored).
    sig_width : int
        Significand width: the largest precision (implicit bit included) of the listed formats.
    exp_range : range
        Every exponent ``o_value`` can carry (Inf / NaN encodings included).
    layout : ExactLayout
        ``ExactLayout(sig_width, exp_range)``: the layout of ``o_value``.
    latency : int
        0: purely combinational (so no ``en`` input).

    Interface
    ---------
    i_bits : In(in_width)
        The encoding.
    i_fmt : In(range(len(formats)))
        Format index; only present when more than one format is listed.
    o_value : Out(ExactLayout(sig_width, exp_range))
        ``sign`` (0 for the unsigned E8M0); ``exp``, the exponent of the significand's LSB
        (meaningful for finite encodings); ``sig``, 0 for zeros, Inf and NaN; ``zero``, ``inf``,
        ``nan``, the classification (at most one is set).
    """

    latency = 0

    @validated_init
    def __init__(self, formats):
        self.formats = check_formats(formats, "Unpack formats", allow_scale=True)
        self.in_width, self.sig_width, self.exp_range = unpack_geometry(self.formats)
        self.layout = ExactLayout(self.sig_width, self.exp_range)
        members = {"i_bits": In(self.in_width)}
        if len(self.formats) > 1:
            members["i_fmt"] = In(range(len(self.formats)))
        members["o_value"] = Out(self.layout)
        super().__init__(members)

    def __repr__(self):
        return f"Unpack({format_names(self.formats)})"

    def _decode(self, m, fmt, idx):
        """Decoder logic of one format; returns (sign, exp, sig, zero, inf, nan) signals."""
        p = f"f{idx}_"
        bits = self.i_bits[: fmt.container_bits]
        # TF32: the ignored low mantissa bits are never read (read as zeros).
        man = bits[fmt.ignored_low_bits : fmt.man_bits]
        ef = bits[fmt.man_bits : fmt.man_bits + fmt.exp_bits]
        s_sign = Signal(name=p + "sign")
        s_exp = Signal(self.o_value.exp.shape(), name=p + "exp")
        s_sig = Signal(self.sig_width, name=p + "sig")
        s_zero, s_inf, s_nan = (Signal(name=p + n) for n in ("zero", "inf", "nan"))
        # Shared nodes are named signals so that each is built once.
        man_nz = Signal(name=p + "man_nz")  # stored (non-ignored) mantissa is nonzero
        man_ones = Signal(name=p + "man_ones")  # stored mantissa is all ones
        normal = Signal(name=p + "normal")  # implicit bit
        top = Signal(name=p + "top_exp")  # exponent field all ones
        m.d.comb += [
            man_nz.eq(man.any() if len(man) else 0),
            man_ones.eq(man.all() if len(man) else 1),
            normal.eq(ef.any() if fmt.special != "e8m0" else 1),
            top.eq(ef.all()),
            s_sign.eq(bits[fmt.bits - 1] if fmt.signed else 0),
        ]
        if fmt.special == "ieee":
            m.d.comb += [s_inf.eq(top & ~man_nz), s_nan.eq(top & man_nz)]
        elif fmt.special == "fn":
            m.d.comb += [s_inf.eq(0), s_nan.eq(top & man_ones)]
        elif fmt.special == "e8m0":
            m.d.comb += [s_inf.eq(0), s_nan.eq(top)]
        else:
            m.d.comb += [s_inf.eq(0), s_nan.eq(0)]
        # Subnormals share the exponent of the smallest normal: field 1 instead of 0.
        field = Cat(ef[0] | ~normal, ef[1:])
        man_full = Cat(Const(0, fmt.ignored_low_bits), man)
        m.d.comb += [
            s_exp.eq(field - (fmt.bias + fmt.man_bits)),
            s_sig.eq(Mux(s_inf | s_nan, 0, Cat(man_full, normal))),
            s_zero.eq(~normal & ~man_nz if fmt.has_zero else 0),
        ]
        return s_sign, s_exp, s_sig, s_zero, s_inf, s_nan

    def elaborate(self, platform):
        m = Module()
        decoded = [self._decode(m, fmt, i) for i, fmt in enumerate(self.formats)]
        v = self.o_value
        outs = (v.sign, v.exp, v.sig, v.zero, v.inf, v.nan)

        def drive(sigs):
            m.d.comb += [o.eq(s) for o, s in zip(outs, sigs)]

        if len(decoded) == 1:
            drive(decoded[0])
        else:
            with m.Switch(self.i_fmt):
                for i, sigs in enumerate(decoded[1:], start=1):
                    with m.Case(i):
                        drive(sigs)
                with m.Default():
                    drive(decoded[0])
        return m
