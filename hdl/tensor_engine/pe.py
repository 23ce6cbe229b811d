"""The Tensor Engine processing element: one design for every mode of the mode table.

See docs/tensor_engine.md ("RTL: hdl/tensor_engine") for the datapath, the port list and the
timing.  In short, one PE of the weight-stationary array:

* registers the moving lane word and its tag (``x_reg``) and passes them right;
* holds two stationary banks (one lane word each), written by a skewed shift chain from the
  left neighbour during LoadStationary;
* runs a product pipeline of :data:`P_PREFIX` register stages off ``x_reg`` and
  ``bank[tag.bank]``: decode + exact multiply of every product lane ``|`` the exact product sum
  (:func:`~ncrtl.hdl.fp.exact.product_sum`), scaled by the two E8M0 block scales in the MX
  mode, or the one product ``|``;
* adds the product (sum) to ``psum_in`` with ONE combinational, correctly rounded
  :class:`~ncrtl.hdl.fp.add_round.AddRound` and registers the FP32 result as ``psum_out``;
* built with ``sparse``, picks a sparse beat's moving operand from the moving words of its
  row group (``i_grp``: the four rows' ``x_reg`` holding the same beat) by the 4-bit tag
  loaded with its stationary word.

The PE knows no mode: the tag of a beat says which formats each lane decodes, whether the lanes
are summed, and whether the beat is a transpose.  :func:`decode_tag` turns an instruction's mode
and format fields into that tag from the mode table (:mod:`ncrtl.model.modes`) once per
instruction, in the control; :func:`tag_fields` is the same decode in Python.
"""

import numpy as np
from amaranth.hdl import EnableInserter, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import WORD
from ncrtl.hdl.fp.add_round import AddRound
from ncrtl.hdl.fp.exact import ExactLayout, fixed_point_window, product_sum, resize_exact
from ncrtl.hdl.fp.mul import ExactMul, product_layout
from ncrtl.hdl.fp.split_sum import fold_psum, split_plan, split_product_sum
from ncrtl.hdl.fp.unpack import Unpack
from ncrtl.model.fp import encode, get_format
from ncrtl.model.modes import ENGINE_MODES, SPARSE_GROUP, SPARSE_RATIOS, operand_formats
from ncrtl.model.tensor_engine.timing import P_PREFIX

__all__ = [
    "PE",
    "TAG_LAYOUT",
    "LS_CTL_LAYOUT",
    "LANE_WIDTH",
    "DATA_WIDTH",
    "SCALE_WIDTH",
    "P_PREFIX",
    "WIDE_FORMATS",
    "NARROW_FORMATS",
    "LANES",
    "decode_tag",
    "tag_fields",
    "one_code",
    "build_modes",
    "registers",
    "stationary_chain",
    "container",
    "SPARSE_TAG_BITS",
    "sparse_slot_width",
    "moving_width",
    "pe_signature",
]

#: Bits of the data part of a lane word: one fp32/tf32/bf16/fp16/fp8 value in its low bits, or
#: one 8-bit slot per product lane (double_row, MX; FP4 in the low 4 bits of its slot).
DATA_WIDTH = 32

#: Bits of the E8M0 block scale above the data (MX; 0 in the other modes).
SCALE_WIDTH = 8

#: Bits of one lane word (one operand slot of the array): data, then the scale.
LANE_WIDTH = DATA_WIDTH + SCALE_WIDTH

#: Exponent range of the MX scale factor ``2**(Es + Ex - 254)`` (E8M0 exponents 0..254).
SCALE_EXP_RANGE = range(-254, 255)

#: Formats of product lane 0: every operand format of the engine's modes.
WIDE_FORMATS = operand_formats(ENGINE_MODES)

#: Product lanes: the most products per PE step of any engine mode.
LANES = max(m.products for m in ENGINE_MODES)

#: Formats of product lanes 1.. (the modes with more than one product; lane ``j`` reads bits
#: ``[8j, 8j + 8)`` of the lane words).
NARROW_FORMATS = operand_formats([m for m in ENGINE_MODES if m.products > 1])

#: Bits of one narrow product lane's operand slot.
NARROW_SLOT = 8

#: Transpose containers by the ``raw`` tag field: the stationary word's low 32, 16 or 8 bits.
RAW_WIDTHS = (32, 16, 8)

#: Bits of a sparse stationary word's tag, in the low bits of its scale byte (bits ``[32, 36)``):
#: ``partition << 2 | element`` (:mod:`ncrtl.model.tensor_engine.sparse`).
SPARSE_TAG_BITS = 4

#: Moving elements per partition of a sparse beat: the largest compression ratio.
SPARSE_SLOTS = max(SPARSE_RATIOS)

#: Rows of a sparse group: the rows whose moving words a sparse PE chooses from.
GROUP_ROWS = SPARSE_GROUP


def sparse_slot_width(modes):
    """Bits of one moving element of a sparse beat in a PE built for ``modes``: the widest
    container of their sparse formats (32 with TF32, 16 with BF16 / FP16, 8 with FP8 only)."""
    fmts = operand_formats([m for m in modes if m.sparse])
    return max((get_format(f).container_bits for f in fmts), default=0)


def moving_width(modes, sparse):
    """Bits of the moving lane word of a PE built for ``modes`` (with the sparse path if
    ``sparse``): :data:`LANE_WIDTH`, or the ``SPARSE_SLOTS`` elements of a sparse beat if
    wider (element ``e`` in bits ``[e w, e w + w)``, ``w`` the :func:`sparse_slot_width`)."""
    if not sparse:
        return LANE_WIDTH
    return max(LANE_WIDTH, SPARSE_SLOTS * sparse_slot_width(modes))


#: Tag of a moving beat, LSB first: the PE's whole configuration for that beat.
#: ``first_row``: this row starts the psum chain (+0.0).  ``fmt_s`` / ``fmt_m``: lane 0 formats
#: (index into :data:`WIDE_FORMATS`); ``lane_s`` / ``lane_m``: lanes 1.. formats (index into
#: :data:`NARROW_FORMATS`); ``fused``: sum the lanes; ``scaled``: scale the sum by the lane
#: words' E8M0 scales (MX); ``raw``: transpose container; ``sparse``: the moving operand is
#: the element of the row group's words that the stationary word's tag picks.
TAG_LAYOUT = data.StructLayout(
    {
        "valid": 1,
        "bank": 1,
        "first_row": 1,
        "transpose": 1,
        "fused": 1,
        "scaled": 1,
        "fmt_s": range(len(WIDE_FORMATS)),
        "fmt_m": range(len(WIDE_FORMATS)),
        "lane_s": range(max(len(NARROW_FORMATS), 1)),
        "lane_m": range(max(len(NARROW_FORMATS), 1)),
        "raw": range(len(RAW_WIDTHS)),
        "sparse": 1,
    }
)

#: Control of a LoadStationary beat, LSB first: the word shifts into bank ``bank``.  (A column
#: tile's LS enters at the tile's own LoadStationary chain, so no PE passes words on unstored.)
LS_CTL_LAYOUT = data.StructLayout({"valid": 1, "bank": 1})


def pe_signature(x_width=LANE_WIDTH, sparse=False):
    """Ports of a PE whose moving lane word has ``x_width`` bits (the Verilog module has
    ``clk`` and ``rst`` too; ``rst`` is unused); ``sparse``: the row group's moving words in
    ``i_grp`` (word ``i`` of group row ``i`` in bits ``[i x_width, +x_width)``)."""
    members = {
        "en": In(1, init=1),
        "i_x": In(x_width),
        "i_tag": In(TAG_LAYOUT),
        "i_ls": In(LANE_WIDTH),
        "i_ls_ctl": In(LS_CTL_LAYOUT),
        "i_psum": In(32),
        "o_x": Out(x_width),
        "o_tag": Out(TAG_LAYOUT),
        "o_ls": Out(LANE_WIDTH),
        "o_ls_ctl": Out(LS_CTL_LAYOUT),
        "o_psum": Out(32),
    }
    if sparse:
        members["i_grp"] = In(GROUP_ROWS * x_width)
    return wiring.Signature(members)


def one_code(fmt):
    """``(code of 1.0, mask of the bits that count)`` of a format's lane word: the transpose
    selection test."""
    f = get_format(fmt)
    one = int(np.asarray(encode(np.array([1.0]), f)).astype(np.int64)[0])
    return one, ((1 << f.container_bits) - 1) & ~((1 << f.ignored_low_bits) - 1)


def _raw_index(fmt):
    return RAW_WIDTHS.index(get_format(fmt).container_bits)


def tag_fields(
    pe_mode, fmt_s, fmt_m, transpose, *, valid=True, bank=0, first_row=False, sparse=False
):
    """The :data:`TAG_LAYOUT` fields of a beat of an instruction: :func:`decode_tag` in Python.

    ``pe_mode`` is a row of the mode table, ``fmt_s`` / ``fmt_m`` the instruction's format
    fields (valid for the mode), ``sparse`` whether it is a sparse matmul."""
    fs, fm = pe_mode.formats_s[fmt_s], pe_mode.formats_m[fmt_m]
    fused = pe_mode.products > 1
    return {
        "valid": int(valid),
        "bank": bank,
        "first_row": int(first_row),
        "transpose": int(transpose),
        "fused": int(fused),
        "scaled": int(pe_mode.scale),
        "fmt_s": WIDE_FORMATS.index(fs),
        "fmt_m": WIDE_FORMATS.index(fm),
        "lane_s": NARROW_FORMATS.index(fs) if fused else 0,
        "lane_m": NARROW_FORMATS.index(fm) if fused else 0,
        # The container of a transpose's raw word (modes that cannot transpose: unused).
        "raw": _raw_index(fs) if pe_mode.transposes else 0,
        "sparse": int(bool(sparse)),
    }


def decode_tag(m, mode, fmt_s, fmt_m, transpose, *, valid, bank, first_row, sparse=0, name="tag"):
    """The PE configuration of an instruction: a :data:`TAG_LAYOUT` signal from its mode,
    format and transpose fields, by the mode table (and ``valid``, ``bank``, ``first_row``,
    ``sparse`` as given).  The fields of an invalid mode or format index are 0 (the control rejects such an
    instruction before any beat)."""
    fields = {
        f: Signal(TAG_LAYOUT.members[f], name=f"{name}_{f}")
        for f in ("fmt_s", "fmt_m", "lane_s", "lane_m", "raw", "fused", "scaled")
    }
    with m.Switch(mode):
        for pe_mode in ENGINE_MODES:
            with m.Case(pe_mode.code):
                m.d.comb += [
                    fields["fused"].eq(pe_mode.products > 1),
                    fields["scaled"].eq(pe_mode.scale),
                ]
                for side, field in (("s", fmt_s), ("m", fmt_m)):
                    formats = pe_mode.formats_s if side == "s" else pe_mode.formats_m
                    with m.Switch(field):
                        for i in range(len(formats)):
                            with m.Case(i):
                                f = tag_fields(pe_mode, i, i, False)
                                m.d.comb += [
                                    fields[f"fmt_{side}"].eq(f[f"fmt_{side}"]),
                                    fields[f"lane_{side}"].eq(f[f"lane_{side}"]),
                                ]
                                if side == "s":
                                    m.d.comb += fields["raw"].eq(f["raw"])
                        with m.Default():
                            m.d.comb += [fields[f"fmt_{side}"].eq(0), fields[f"lane_{side}"].eq(0)]
                            if side == "s":
                                m.d.comb += fields["raw"].eq(0)
        with m.Default():
            m.d.comb += [v.eq(0) for v in fields.values()]
    tag = Signal(TAG_LAYOUT, name=name)
    m.d.comb += [
        tag.valid.eq(valid),
        tag.bank.eq(bank),
        tag.first_row.eq(first_row),
        tag.transpose.eq(transpose),
        tag.sparse.eq(sparse),
    ]
    m.d.comb += [getattr(tag, f).eq(v) for f, v in fields.items()]
    return tag


def registers(m):
    """``reg(name, value)``: a reset-less ``m.d.sync`` register of ``value`` (the cells' pipeline
    registers; the cell's ``EnableInserter`` gives them the clock enable)."""

    def reg(name, value):
        r = Signal(value.shape(), name=name, reset_less=True)
        m.d.sync += r.eq(value)
        return r

    return reg


def stationary_chain(m, reg, cell, read_bank):
    """The two stationary banks of a cell (``len(cell.i_ls)`` bits each) and its LoadStationary
    shift chain: ``i_ls`` shifts into bank ``i_ls_ctl.bank`` when ``i_ls_ctl.valid``, and the
    word it displaces goes right in ``o_ls`` with the control in ``o_ls_ctl``, both
    registered.  Returns the word of bank ``read_bank`` (the beat's)."""
    width = len(cell.i_ls)
    banks = [Signal(width, name=f"bank{b}", reset_less=True) for b in range(2)]
    ls = cell.i_ls_ctl
    ls_rd = Signal(width, name="ls_rd")  # word displaced from the target bank
    m.d.comb += ls_rd.eq(Mux(ls.bank, banks[1], banks[0]))
    for b in range(2):
        with m.If(ls.valid & (ls.bank == b)):
            m.d.sync += banks[b].eq(cell.i_ls)
    m.d.comb += [cell.o_ls.eq(reg("ls_out", ls_rd)), cell.o_ls_ctl.eq(reg("ls_ctl_reg", ls))]
    s_word = Signal(width, name="s_word")
    m.d.comb += s_word.eq(Mux(read_bank, banks[1], banks[0]))
    return s_word


def container(m, raw, word, name):
    """``word`` cut to the transpose container ``raw`` (an index into :data:`RAW_WIDTHS`: its
    low 32, 16 or 8 bits, zero-extended)."""
    out = Signal(len(word), name=name)
    with m.Switch(raw):
        for i, w in enumerate(RAW_WIDTHS[1:], start=1):
            with m.Case(i):
                m.d.comb += out.eq(word[:w])
        with m.Default():  # index 0, the widest (and no other index occurs)
            m.d.comb += out.eq(word[: RAW_WIDTHS[0]])
    return out


def build_modes(modes=None):
    """The engine modes of a PE build, in table order: every engine mode for None, else the
    given :class:`~ncrtl.model.modes.PeMode` s (``ncrtl.model.modes.pe_modes`` makes them from
    names); ``ValueError`` for anything else."""
    modes = ENGINE_MODES if modes is None else tuple(modes)
    if not modes or any(m not in ENGINE_MODES for m in modes):
        raise ValueError(
            f"PE modes must be engine modes (ncrtl.model.modes.pe_modes), not {modes!r}"
        )
    return tuple(m for m in ENGINE_MODES if m in modes)


class PE(wiring.Component):
    """One processing element (see the module docstring and docs/tensor_engine.md).

    Timing (``en`` = 1 every cycle): a beat in ``x_reg`` during cycle ``T`` reads
    ``bank[tag.bank]`` in cycle ``T``, has its products registered at ``T + 1`` and its operand
    B (product or product sum) at ``T + 2`` (:data:`P_PREFIX` stages), is added to ``i_psum``
    combinationally during cycle ``T + P_PREFIX`` and is in ``o_psum`` during
    ``T + P_PREFIX + 1``.  So ``i_psum`` must carry the psum of the same beat in cycle
    ``T + P_PREFIX`` (the PE above registered it one cycle earlier, having seen the beat one
    cycle earlier: the skew).

    Lanes: lane 0 multiplies any operand format (:data:`WIDE_FORMATS`, including the FP32
    24 x 24 product); lanes 1 .. :data:`LANES` - 1 multiply the formats of the multi-product
    modes (:data:`NARROW_FORMATS`) from the lane word's byte ``j``.  A ``fused`` beat sums every
    lane's product exactly (lane 0's product is then a narrow one too); a ``scaled`` beat (MX)
    multiplies that sum by ``2**(Es + Ex - 254)``, ``Es`` / ``Ex`` the E8M0 scales in bits
    ``[32, 40)`` of the stationary and the moving lane word (0xFF: NaN), exactly (an exponent
    shift before the one rounding).

    Parameters
    ----------
    modes : sequence of PeMode or None
        The modes the PE is built for (``ncrtl.model.modes.pe_modes``; None: every engine
        mode, the synthesis design).  A PE for part of the mode table has only the
        multipliers, lanes and paths its modes use (narrower words, fewer lanes): the tag stays
        the whole table's, and a beat of another mode never reaches it (the control rejects
        the instruction with ``Error.MODE``).
    sparse : bool
        The sparse path: a wider moving word (:func:`moving_width`) and ``i_grp``.  A sparse
        beat (``tag.sparse``) multiplies the stationary element by element ``t & 3`` of group
        row ``t >> 2``'s moving word in ``i_grp``, ``t`` the tag in bits ``[32, 36)`` of the
        stationary word.

    Interface
    ---------
    en : In(1, init=1)
        Clock enable of every register.
    i_x : In(x_width), i_tag : In(TAG_LAYOUT)
        Moving lane word (data in bits ``[0, 32)``, scale in ``[32, 40)``; a sparse beat's
        elements in slots of :func:`sparse_slot_width` bits) and tag from the left neighbour
        (or the row's skew line).
    i_grp : In(4 * x_width)
        With ``sparse``: the ``x_reg`` of the four PEs of this PE's row group that hold its
        beat (its own included), group row ``i`` in word ``i``.
    i_ls : In(LANE_WIDTH), i_ls_ctl : In(LS_CTL_LAYOUT)
        LoadStationary shift chain from the left neighbour.
    i_psum : In(32)
        FP32 psum (or transpose word) from the PE above.
    o_x, o_tag : Out
        ``x_reg``: the moving lane word and tag, to the right neighbour.
    o_ls, o_ls_ctl : Out
        The shift chain to the right neighbour: the displaced bank word.
    o_psum : Out(32)
        ``psum_out`` register, to the PE below.
    """

    #: Cycles from ``x_reg`` to ``psum_out``.
    latency = P_PREFIX + 1

    def __init__(self, modes=None, sparse=False):
        self.modes = build_modes(modes)
        if sparse and not any(m.sparse for m in self.modes):
            raise ValueError(
                f"a sparse PE needs a mode with sparse matmuls, not {[m.name for m in self.modes]}"
            )
        self.sparse = bool(sparse)
        #: Bits of the moving lane word and of one sparse element.
        self.x_width = moving_width(self.modes, self.sparse)
        self.slot_width = sparse_slot_width(self.modes) if self.sparse else 0
        #: Formats of product lane 0 and of lanes 1.. in this build; product lanes; MX scales;
        #: transposes.
        self.wide = operand_formats(self.modes)
        self.narrow = operand_formats([m for m in self.modes if m.products > 1])
        self.lanes = max(m.products for m in self.modes)
        self.scaled = any(m.scale for m in self.modes)
        self.transposes = any(m.transposes for m in self.modes)
        #: The split product sum's plan (:func:`~ncrtl.hdl.fp.split_sum.split_plan`) where the
        #: exact sum needs words of more than 64 bits; set by ``elaborate``.
        self.split = None
        super().__init__(pe_signature(self.x_width, self.sparse))

    @staticmethod
    def _local(m, field, table, mine, name):
        """``field``, an index into the whole table's format list ``table``, as an index into
        this build's ``mine`` (0 for a format the build lacks: never used)."""
        if tuple(mine) == tuple(table):
            return field
        local = Signal(range(max(2, len(mine))), name=name)
        with m.Switch(field):
            for i, f in enumerate(mine):
                with m.Case(table.index(f)):
                    m.d.comb += local.eq(i)
            with m.Default():
                m.d.comb += local.eq(0)
        return local

    def elaborate(self, platform):
        m = Module()
        reg = registers(m)
        x, tag = reg("x_reg", self.i_x), reg("tag_reg", self.i_tag)
        m.d.comb += [self.o_x.eq(x), self.o_tag.eq(tag)]
        s_word = stationary_chain(m, reg, self, tag.bank)
        r1 = self._multiply(m, reg, x, tag, s_word)
        r2 = self._sum(m, reg, r1)
        self._accumulate(m, reg, r2)
        return EnableInserter(self.en)(m)

    def _multiply(self, m, reg, x_lane, tag, s_lane):
        """Stage 1: decode and multiply every lane exactly; the block-scale exponent; the
        transpose word and its test."""
        x, s_word = x_lane[:DATA_WIDTH], s_lane[:DATA_WIDTH]
        if self.sparse:
            # The sparse operand: element t & 3 of group row t >> 2's word (each word of the
            # group holds this beat now: the array wires the rows' x_reg along the wavefront).
            # (A case per tag, not a variable shift: Verilog's shift of the 4-word group would
            # be wider than its result.)
            t = s_lane[DATA_WIDTH : DATA_WIDTH + SPARSE_TAG_BITS]
            picked = Signal(self.slot_width, name="x_picked")
            w, sw = self.x_width, self.slot_width
            with m.Switch(t):
                for code in range(1 << SPARSE_TAG_BITS):
                    row, slot = code >> 2, code & 3
                    with m.Case(code):
                        at = row * w + slot * sw
                        m.d.comb += picked.eq(self.i_grp[at : at + sw])
            x_eff = Signal(DATA_WIDTH, name="x_eff")
            m.d.comb += x_eff.eq(Mux(tag.sparse, picked, x))
            x = x_eff
        fmt_s = self._local(m, tag.fmt_s, WIDE_FORMATS, self.wide, "fmt_s_local")
        fmt_m = self._local(m, tag.fmt_m, WIDE_FORMATS, self.wide, "fmt_m_local")
        m.submodules.mul0 = mul0 = ExactMul(self.wide, self.wide)
        m.d.comb += [mul0.i_a.eq(s_word), mul0.i_b.eq(x)]
        if len(self.wide) > 1:
            m.d.comb += [mul0.i_fmt_a.eq(fmt_s), mul0.i_fmt_b.eq(fmt_m)]
        lanes = []
        lane_s = self._local(m, tag.lane_s, NARROW_FORMATS, self.narrow, "lane_s_local")
        lane_m = self._local(m, tag.lane_m, NARROW_FORMATS, self.narrow, "lane_m_local")
        for j in range(1, self.lanes):
            m.submodules[f"mul{j}"] = mul = ExactMul(self.narrow, self.narrow)
            slot = slice(NARROW_SLOT * j, NARROW_SLOT * (j + 1))
            m.d.comb += [mul.i_a.eq(s_word[slot]), mul.i_b.eq(x[slot])]
            if len(self.narrow) > 1:
                m.d.comb += [mul.i_fmt_a.eq(lane_s), mul.i_fmt_b.eq(lane_m)]
            lanes.append(reg(f"r1_p{j}", mul.o_product))
        # MX: the scale factor 2**(Es + Ex - 254) as an exponent (0 unless scaled), NaN for an
        # E8M0 0xFF on either side.
        scale_exp = Signal(signed(10), name="scale_exp")
        scale_nan = Signal(name="scale_nan")
        if self.scaled:
            es, ex = s_lane[DATA_WIDTH:LANE_WIDTH], x_lane[DATA_WIDTH:LANE_WIDTH]
            m.d.comb += [
                scale_exp.eq(Mux(tag.scaled, es + ex - 254, 0)),
                scale_nan.eq(tag.scaled & (es.all() | ex.all())),
            ]
        p0 = Signal(mul0.layout, name="p0")
        m.d.comb += p0.eq(mul0.o_product)
        # Transpose: is the moving word exactly 1.0 in its format?  The stationary word, cut to
        # its container, rides in lane 0's significand (a transpose multiplies nothing).
        is_one = Signal(name="is_one")
        if self.transposes:
            with m.Switch(tag.fmt_m):
                for f in self.wide:
                    code, mask = one_code(f)
                    with m.Case(WIDE_FORMATS.index(f)):
                        m.d.comb += is_one.eq((x & mask) == code)
                with m.Default():  # no format of that index: never a selection one
                    m.d.comb += is_one.eq(0)
            raw = container(m, tag.raw, s_word, "raw_s")
            m.d.comb += p0.sig.eq(Mux(tag.transpose, raw, mul0.o_product.sig))
        return dict(
            p0=reg("r1_p0", p0),
            lanes=lanes,
            valid=reg("r1_valid", tag.valid),
            first=reg("r1_first", tag.first_row),
            tr=reg("r1_transpose", tag.transpose),
            fused=reg("r1_fused", tag.fused),
            scale_exp=reg("r1_scale_exp", scale_exp),
            scale_nan=reg("r1_scale_nan", scale_nan),
            one=reg("r1_one", is_one),
        )

    def _sum(self, m, reg, r1):
        """Stage 2: operand B of the psum adder: the exact sum of the lanes (a fused beat),
        times the block scales (a scaled beat: an exponent shift), or lane 0's product."""
        p0 = r1["p0"]
        split = None
        if self.lanes == 1:
            b = p0
        else:
            narrow = [get_format(f) for f in self.narrow]
            window = fixed_point_window(narrow, narrow, self.lanes)
            narrow0 = resize_exact(m, p0, product_layout(narrow, narrow), name="s2_p0_narrow")
            terms = [narrow0, *r1["lanes"]]
        if self.lanes > 1 and window.total + 3 > WORD:
            # The exact sum would need words wider than 64 bits (e5m2 products): two limbs,
            # and the psum folded in at stage 3 (hdl/fp/split_sum.py).
            self.split = split_plan(window, out_min=p0.shape().sig_width)
            s = split_product_sum(m, terms, self.split, name="s2_sum")
            split = {k: reg(f"r2_sum_{k}", v) for k, v in s.items()}
            split.update(
                fused=reg("r2_fused", r1["fused"]),
                scale_exp=reg("r2_scale_exp", r1["scale_exp"]),
                scale_nan=reg("r2_scale_nan", r1["scale_nan"]),
            )
            b = p0
        elif self.lanes > 1:
            total = product_sum(m, terms, window, name="s2_sum")
            lsb = window.lsb
            scaled = ExactLayout(
                total.shape().sig_width,
                range(lsb + SCALE_EXP_RANGE.start, lsb + SCALE_EXP_RANGE.stop),
            )
            b = Signal(p0.shape().union(scaled), name="s2_b")
            for f in ("sign", "sig", "zero", "inf"):
                m.d.comb += getattr(b, f).eq(Mux(r1["fused"], getattr(total, f), getattr(p0, f)))
            m.d.comb += [
                b.exp.eq(Mux(r1["fused"], total.exp + r1["scale_exp"], p0.exp)),
                b.nan.eq(Mux(r1["fused"], total.nan | r1["scale_nan"], p0.nan)),
            ]
        return dict(
            b=reg("r2_b", b),
            split=split,
            valid=reg("r2_valid", r1["valid"]),
            first=reg("r2_first", r1["first"]),
            tr=reg("r2_transpose", r1["tr"]),
            one=reg("r2_one", r1["one"]),
        )

    def _accumulate(self, m, reg, r2):
        """Stage 3: ``psum_out = round_fp32(psum_in + B)`` (one rounding), a transpose's
        selection, or the psum passed through (a bubble, a row outside the tile)."""
        psum_eff = Signal(32, name="psum_eff")
        m.d.comb += psum_eff.eq(Mux(r2["first"], 0, self.i_psum))
        m.submodules.unpack_psum = up = Unpack(["fp32"])
        a, b = up.o_value, r2["b"]
        split = r2["split"]
        if split is not None:
            a, folded = fold_psum(
                m,
                split,
                up.o_value,
                split["scale_exp"],
                split["scale_nan"],
                split["fused"],
                self.split,
                name="s3_fold",
            )
            b = Signal(folded.shape().union(b.shape()), name="s3_b")
            for f in ("sign", "exp", "sig", "zero", "inf", "nan"):
                m.d.comb += getattr(b, f).eq(
                    Mux(split["fused"], getattr(folded, f), getattr(r2["b"], f))
                )
        m.submodules.add = add = AddRound(up.layout, b.shape(), pipelined=False)
        m.d.comb += [up.i_bits.eq(psum_eff), add.i_a.eq(a), add.i_b.eq(b)]
        psum_next = Signal(32, name="psum_next")
        with m.If(~r2["valid"]):
            m.d.comb += psum_next.eq(self.i_psum)
        with m.Elif(r2["tr"]):
            m.d.comb += psum_next.eq(Mux(r2["one"], r2["b"].sig[:32], psum_eff))
        with m.Else():
            m.d.comb += psum_next.eq(add.o_result)
        m.d.comb += self.o_psum.eq(reg("psum_out", psum_next))
