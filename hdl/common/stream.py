"""Valid/ready stream wrapper around lanes of an ``en``-pipelined unit (test and top level).

Every valid/ready interface of the design is an :class:`amaranth.lib.stream.Signature`: a
``payload``, ``valid`` (producer to consumer) and ``ready`` (consumer to producer); a payload
is transferred at a rising edge where ``valid`` and ``ready`` are both 1, and a producer holds
``valid`` and the payload until then.  Blocks are joined with :func:`amaranth.lib.wiring.connect`,
and a stream named ``x`` of a Verilog top has the ports ``x__valid``, ``x__ready`` and
``x__payload`` (the testbench's :class:`~ncrtl.testbench.stream.StreamBus`).
"""

from amaranth.hdl import Cat, Module, Mux, Shape, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .params import check_int, validated_init

__all__ = ["StreamLanes", "vector_layout"]


def vector_layout(lanes):
    """Payload of a stream of vectors of 32-bit lane words (the Tensor Engine's output, PSUM's
    write data): ``data``, lane ``c`` in bits ``[32c, 32c + 32)``, and ``last``, the vector ends
    its instruction."""
    return data.StructLayout({"data": 32 * lanes, "last": 1})


def _port(unit, name):
    """The port ``name`` of ``unit``; ``"o_product.sign"`` is a field of a struct port."""
    value = unit
    for part in name.split("."):
        value = getattr(value, part)
    return value


class StreamLanes(wiring.Component):
    """``lanes`` copies of a unit behind ONE valid/ready input stream and ONE output stream.

    The unit is any :class:`~amaranth.lib.wiring.Component` with a fixed ``latency`` attribute,
    ports only (no nested interfaces; a port may have a struct layout, carried as its fields),
    inputs named ``i_*``, outputs named ``o_*``, and (when ``latency > 0``) a clock enable ``en``
    that freezes its whole pipeline.  Every lane gets the same ``en``, so
    the lanes move in lock step and one beat carries one operation per lane.

    Flow control: a ``latency``-bit shift register of valid flags runs alongside the pipeline.
    The pipeline advances (``en = 1``) when its output slot is empty or being taken
    (``advance = ~o_stream.valid | o_stream.ready``), and an input beat is accepted exactly when
    it advances (``i_stream.ready = advance``), so no beat is lost or duplicated under any
    ready pattern; the output payload holds steady while it waits.  Cycles without an input beat
    still advance the pipeline and reach the units as all-zero inputs (a bubble), which a
    stateful unit must treat as "do nothing" (the XORWOW generator does: no load, no step).
    ``i_stream.ready`` depends combinationally on ``o_stream.ready`` (no skid buffer).  Bubbles
    inside the pipeline are not squeezed out while the output is stalled.  A combinational unit
    (``latency == 0``, no ``en``) gets one output register, loaded on ``advance``, so that every
    top is clocked the same way (``clk``, ``rst``) and has a latency of at least 1.

    Payload layout: the input payload is the concatenation of every lane's ``i_*`` ports, lane 0
    in the low bits and, within a lane, the ports in signature order starting at the lane's LSB
    (see :attr:`in_fields`); the output payload likewise for the ``o_*`` ports
    (:attr:`out_fields`).  Signed ports are carried as their two's complement bits.

    Parameters
    ----------
    factory : callable
        Called ``lanes`` times without arguments; returns a fresh unit each time.
    lanes : int
        Number of copies.

    Attributes
    ----------
    units : list of Component
        The lane instances.
    latency : int
        ``max(unit latency, 1)``: a beat accepted at a clock edge appears on ``o_stream``
        ``latency`` pipeline advances later.
    unit_latency : int
        The unit's own latency.
    in_fields, out_fields : list of (str, int)
        ``(port name, width)`` of one lane's fields, LSB first; a struct port contributes one
        field per member, named ``port.member`` (``o_product.sign``).
    in_lane_width, out_lane_width : int
        Bits per lane of the input / output payload.

    Interface
    ---------
    i_stream : In(stream.Signature(lanes * in_lane_width))
        Operations, one per lane.
    o_stream : Out(stream.Signature(lanes * out_lane_width))
        Results, one per lane.
    """

    @validated_init
    def __init__(self, factory, lanes):
        self.units = []
        if not callable(factory):
            raise TypeError(f"Unit factory must be callable, not {factory!r}")
        self.lanes = check_int(lanes, "Lane count", minimum=1)
        self.units = [factory() for _ in range(lanes)]
        self._inspect(self.units)
        super().__init__(
            {
                "i_stream": In(stream.Signature(lanes * self.in_lane_width)),
                "o_stream": Out(stream.Signature(lanes * self.out_lane_width)),
            }
        )

    def _inspect(self, units):
        """Validate the lane units; derive latency and field layouts from the first one."""
        unit = units[0]
        if not isinstance(unit, wiring.Component):
            raise TypeError(f"Unit factory must return a wiring.Component, not {unit!r}")
        latency = getattr(unit, "latency", None)
        if not isinstance(latency, int) or isinstance(latency, bool) or latency < 0:
            raise TypeError(
                f"Unit {unit!r} must have a non-negative integer latency, not {latency!r}"
            )
        in_fields, out_fields, signed_out = [], [], {}
        has_en = False
        for name, member in unit.signature.members.items():
            if not member.is_port:
                raise TypeError(
                    f"Unit member {name!r} is not a plain port; StreamLanes wraps "
                    f"units with flat i_*/o_* ports only"
                )
            shape = Shape.cast(member.shape)
            if name == "en" and member.flow == In and shape.width == 1:
                has_en = True
            elif name.startswith(("i_", "o_")) and member.flow == (In if name[0] == "i" else Out):
                # A struct port (an exact value) is carried as its fields, in layout order.
                fields = (
                    [(f"{name}.{f}", Shape.cast(v.shape)) for f, v in member.shape]
                    if isinstance(member.shape, data.StructLayout)
                    else [(name, shape)]
                )
                target = in_fields if name[0] == "i" else out_fields
                for fname, fshape in fields:
                    target.append((fname, fshape.width))
                    signed_out[fname] = fshape.signed
            else:
                raise TypeError(
                    f"Unit port {name!r} ({member.flow.name}) is neither an 'i_*' "
                    f"input, an 'o_*' output nor a 1-bit 'en' input"
                )
        if latency > 0 and not has_en:
            raise TypeError(f"Unit {unit!r} has latency {latency} but no 'en' clock enable")
        if not in_fields or not out_fields:
            raise TypeError(f"Unit {unit!r} needs at least one i_* input and one o_* output")
        for other in units[1:]:
            if other.signature != unit.signature or getattr(other, "latency", None) != latency:
                raise TypeError("Unit factory must return units of one signature and latency")
        self.unit_latency = latency
        self.latency = max(latency, 1)
        self.in_fields, self.out_fields = in_fields, out_fields
        self._out_signed = signed_out
        self.in_lane_width = sum(w for _, w in in_fields)
        self.out_lane_width = sum(w for _, w in out_fields)

    # -- packing helpers for testbenches ---------------------------------------------------------
    def pack_inputs(self, lane_values):
        """Pack a list (one per lane) of ``{port name: int}`` dicts into an input payload."""
        if len(lane_values) != self.lanes:
            raise ValueError(f"Expected values for {self.lanes} lanes, got {len(lane_values)}")
        word, pos = 0, 0
        for values in lane_values:
            for name, width in self.in_fields:
                word |= (int(values.get(name, 0)) & ((1 << width) - 1)) << pos
                pos += width
        return word

    def unpack_outputs(self, word):
        """Split an output payload into a list (one per lane) of ``{port name: int}`` dicts.

        Signed ports are sign-extended.
        """
        word, out = int(word), []
        for _ in range(self.lanes):
            values = {}
            for name, width in self.out_fields:
                v = word & ((1 << width) - 1)
                if self._out_signed[name] and v >> (width - 1):
                    v -= 1 << width
                values[name] = v
                word >>= width
            out.append(values)
        return out

    def elaborate(self, platform):
        m = Module()
        for i, unit in enumerate(self.units):
            m.submodules[f"lane{i}"] = unit
        in_pos, outs = 0, []
        # The pipeline also advances on cycles without an input beat; those bubbles reach the
        # units as all-zero operations, so a stateful unit (the XORWOW generator) sees "no load,
        # no step" instead of whatever the idle bus holds.
        i, o = self.i_stream, self.o_stream
        data_in = Signal.like(i.payload, name="data")
        m.d.comb += data_in.eq(Mux(i.valid, i.payload, 0))
        for unit in self.units:
            for name, width in self.in_fields:
                m.d.comb += _port(unit, name).eq(data_in[in_pos : in_pos + width])
                in_pos += width
            outs += [_port(unit, name) for name, _ in self.out_fields]
        if self.unit_latency == 0:
            # Combinational unit: the output register is the pipeline.
            out_reg = Signal(len(o.payload), name="out_reg", reset_less=True)
            m.d.comb += o.payload.eq(out_reg)
        else:
            m.d.comb += o.payload.eq(Cat(*outs))

        valid = Signal(self.latency, name="valid")  # valid[k]: stage k+1 holds a beat
        advance = Signal(name="advance")
        m.d.comb += [
            advance.eq(~valid[-1] | o.ready),
            i.ready.eq(advance),
            o.valid.eq(valid[-1]),
        ]
        with m.If(advance):
            m.d.sync += valid.eq(Cat(i.valid, valid[:-1]))
            if self.unit_latency == 0:
                m.d.sync += out_reg.eq(Cat(*outs))
        if self.unit_latency > 0:
            for unit in self.units:
                m.d.comb += unit.en.eq(advance)
        return m
