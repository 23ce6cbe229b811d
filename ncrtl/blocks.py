"""The block registry: every block the CLI can generate, lint and test, with its parameters.

A block turns validated parameters into a top-level Amaranth component (its Verilog top) and names
the cocotb testbench that checks it against the golden model.  Groups name sets of
``(block, params)`` configurations that ``ncrtl lint`` and ``ncrtl conformance`` run together.
"""

import json
from dataclasses import dataclass, field

from ncrtl.hdl.tensor_engine import VERILATOR_CONFIG as TE_VERILATOR_CONFIG
from ncrtl.model.modes import MODES, get_mode, operand_formats, operation, operations

__all__ = [
    "BlockError",
    "Param",
    "Block",
    "register",
    "get",
    "all_blocks",
    "GROUPS",
    "dma_widths",
    "OPERAND_FORMATS",
    "TE_MODES",
    "CORE_MODES",
    "SENDRECV_SLOT",
    "sendrecv_pairs",
    "neuroncore_geometry",
    "NEURONCORE_SMALL",
]


class BlockError(ValueError):
    """Unknown block, unknown parameter or bad parameter value."""


#: What a parameter sets: the design (``hardware``: the Verilog changes with it), the
#: conformance program run on the design (``program``: the stimulus, not the Verilog), or only
#: how the simulation is built (``build``: the same Verilog and program).
ROLES = ("hardware", "program", "build")


@dataclass(frozen=True)
class Param:
    """One block parameter: ``--param name=value`` on the command line; ``role`` one of
    :data:`ROLES`."""

    name: str
    kind: type
    default: object
    help: str
    choices: tuple = ()
    minimum: object = None
    maximum: object = None
    role: str = "hardware"

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(
                f"parameter {self.name}: role must be one of {ROLES}, not {self.role!r}"
            )

    def convert(self, block, text):
        if self.kind is bool:
            if str(text).lower() in ("1", "true", "yes", "on"):
                value = True
            elif str(text).lower() in ("0", "false", "no", "off"):
                value = False
            else:
                raise BlockError(
                    f"{block}: parameter {self.name}={text!r} is not a boolean "
                    f"(use 0/1, true/false)"
                )
        else:
            try:
                value = self.kind(text)
            except (TypeError, ValueError):
                raise BlockError(
                    f"{block}: parameter {self.name}={text!r} is not "
                    f"{'an integer' if self.kind is int else 'a ' + self.kind.__name__}"
                ) from None
        if self.choices and value not in self.choices:
            raise BlockError(
                f"{block}: parameter {self.name}={value!r} is not allowed; "
                f"allowed: {', '.join(map(str, self.choices))}"
            )
        if self.minimum is not None and value < self.minimum:
            raise BlockError(
                f"{block}: parameter {self.name}={value!r} is below the minimum {self.minimum}"
            )
        if self.maximum is not None and value > self.maximum:
            raise BlockError(
                f"{block}: parameter {self.name}={value!r} is above the maximum {self.maximum}"
            )
        return value


@dataclass(frozen=True)
class Block:
    """A generatable, testable block.

    Parameters
    ----------
    name : str
        Registry name (``fp.dot_add``).
    summary : str
        One line for ``ncrtl list``.
    params : tuple of Param
    make : callable
        ``make(**hardware) -> component`` building the top-level component from the hardware
        parameters (:meth:`hardware`).
    top : callable
        ``top(**hardware) -> str``: the Verilog module name of the top.
    testbench : str
        cocotb test module checking the block (run by :mod:`ncrtl.testbench.conformance`).
    sim_args : tuple of str
        More Verilator arguments of the block's simulation build.
    threads : callable or None
        ``threads(**params) -> int``: Verilator threads of the simulation build (1 if None).
    stimulus : callable or None
        ``stimulus(count, **params) -> str``: what a conformance run of ``count`` (``--count``)
        streams through the block, in words (:meth:`describe`); None: ``count`` random vectors.
    training : callable or None
        ``training(params, player) -> (test_module, env)``: the run a profile-guided build
        (parameter ``pgo=1``) trains on, its cocotb module and the environment beside the
        usual ``NCRTL_*`` (``player``: the build has stream players); None: no such build.
    check : callable or None
        ``check(**params)``: raises :class:`BlockError` for a combination of parameters the
        design cannot be built with (each value already in its range); :meth:`resolve` calls
        it, so a combination is refused before anything is generated.
    program_check : callable or None
        ``program_check(**params)``: raises :class:`BlockError` for a design its conformance
        program cannot run on (an MX program on an array smaller than its K granule, an SBUF
        too small for the program's regions); :meth:`check_program`, called by every run
        (``ncrtl conformance``, ``ncrtl sim``, the Python API) before it generates anything.
    synth_parts : callable or None
        ``synth_parts(**hardware) -> {name: component}``: what a synthesis check of the block
        synthesizes, one by one, instead of the whole flattened design (for a block that joins
        blocks checked on their own and that Yosys takes too long on as a whole); None: the
        whole design.
    runner : str
        ``"module:function"`` of a runner a conformance run tries before the cocotb testbench:
        ``function(block, params, *, count, seed, stall, waves, progress)`` returns the run's
        ``BlockResult``, or None to leave the run to the testbench (``pe_array``: column bands
        of a full-size engine, :mod:`ncrtl.testbench.tensor_engine.loop_run`); "": none.
    program_modes : callable or None
        ``program_modes(**params) -> mode names``: the engine modes of the instructions of the
        run ``params`` describe, for a block whose PEs are built for part of the mode table
        (parameter ``pe_modes``): :meth:`resolve_run` builds the narrowest PE that serves them.
    follows : tuple of (str, str)
        ``(name, source)``: parameter ``name`` takes ``source``'s value unless given itself
        (the NeuronCore's PE rows and columns follow its partitions), for every command alike.
    presets : dict
        ``{name: {parameter: value}}``: named configurations of the block (the documented small
        cores), which given parameters override (:meth:`resolve`'s ``preset``).
    """

    name: str
    summary: str
    params: tuple
    make: object
    top: object
    testbench: str = ""
    sim_args: tuple = ()
    threads: object = None
    stimulus: object = None
    training: object = None
    check: object = None
    program_check: object = None
    synth_parts: object = None
    program_modes: object = None
    runner: str = ""
    follows: tuple = ()
    presets: dict = field(default_factory=dict)

    def build_args(self, params):
        """Verilator arguments of the block's simulation build for ``params``: ``sim_args``, plus
        ``--threads N`` when the block's ``threads(**params)`` asks for more than one."""
        n = self.threads(**params) if self.threads is not None else 1
        return tuple(self.sim_args) + (("--threads", str(n)) if n > 1 else ())

    def resolve(self, user, preset=None):
        """Validate ``{name: text}`` from the command line; return the full parameter dict.
        ``preset``: a name of :attr:`presets` whose values stand in for the defaults."""
        known = {p.name: p for p in self.params}
        for k in user:
            if k not in known:
                allowed = ", ".join(known) or "none"
                raise BlockError(f"{self.name}: unknown parameter {k!r}; allowed: {allowed}")
        base = {}
        if preset is not None:
            if preset not in self.presets:
                raise BlockError(
                    f"{self.name}: unknown preset {preset!r}; presets: "
                    f"{', '.join(self.presets) or 'none'}"
                )
            base = self.presets[preset]
        user = {**{k: str(v) for k, v in base.items()}, **user}
        for name, source in self.follows:
            if name not in user and source in user:
                user[name] = user[source]
        out = {}
        for p in self.params:
            out[p.name] = p.convert(self.name, user[p.name]) if p.name in user else p.default
        if self.check is not None:
            self.check(**out)
        return out

    def resolve_run(self, user):
        """``(params, why)``: :meth:`resolve` of ``user`` for a simulation.  A block built for
        part of the mode table gets the narrowest PE build serving its run's instructions
        (:attr:`program_modes`, :func:`ncrtl.model.modes.narrowest_pe_modes`) unless ``user``
        names ``pe_modes``; ``why`` says which build and why in words (None when ``user``
        chose it or the block has no such parameter).  ``pe_modes=all`` stays the default of
        :meth:`resolve`: the reference and synthesis design."""
        from ncrtl.model.modes import narrowest_pe_modes

        params = self.resolve(user)
        if self.program_modes is None or "pe_modes" in user:
            return params, None
        spec, why = narrowest_pe_modes(self.program_modes(**params))
        return self.resolve({**user, "pe_modes": spec}), f"pe_modes={spec}: {why}"

    def check_program(self, params):
        """Raise :class:`BlockError` when the block's conformance program cannot run on the
        design of ``params`` (:attr:`program_check`)."""
        if self.program_check is not None:
            self.program_check(**params)

    def describe(self, params, count):
        """What a conformance run with ``--count count`` streams through the block, in words:
        how the testbench uses ``count`` (exhaustive sets and fixed programs say that
        ``--count`` does not apply)."""
        if self.stimulus is None:
            return f"{count} random vectors"
        return self.stimulus(count, **params)

    def label(self, params):
        shown = ",".join(f"{k}={v}" for k, v in params.items() if k != "lanes")
        return f"{self.name}[{shown}]" if shown else self.name

    def hardware(self, params):
        """The hardware parameters of ``params``: what :attr:`make` and :attr:`top` take (a
        program or build parameter never changes the design)."""
        roles = {p.name: p.role for p in self.params}
        return {k: v for k, v in params.items() if roles.get(k, "hardware") == "hardware"}

    def component(self, params):
        return self.make(**self.hardware(params))

    def top_name(self, params):
        """The Verilog module name of the top for ``params`` (its hardware parameters)."""
        return self.top(**self.hardware(params))

    def synthesis_units(self, params):
        """``[(verilog_text, top)]`` of what a synthesis check of ``params`` synthesizes: the
        synthesis view of the whole block, or of each of its :attr:`synth_parts`."""
        from ncrtl.hdl.verilog import convert

        if self.synth_parts is None:
            return [self.verilog(params, synthesis=True)]
        parts = self.synth_parts(**self.hardware(params))
        return [(convert(c, name, synthesis=True), name) for name, c in parts.items()]

    def verilog(self, params, *, synthesis=False):
        """``(verilog_text, top_name)`` of the block for ``params``
        (:func:`ncrtl.hdl.verilog.convert`; ``synthesis``: its synthesis view, SRAM macros as
        blackboxes)."""
        from ncrtl.hdl.verilog import convert

        top = self.top_name(params)
        return convert(self.component(params), top, synthesis=synthesis), top


_BLOCKS = {}


def register(block):
    if block.name in _BLOCKS:
        raise ValueError(f"block {block.name!r} is registered twice")
    _BLOCKS[block.name] = block
    return block


def get(name):
    """The block called ``name``; :class:`BlockError` lists the known ones otherwise."""
    if name not in _BLOCKS:
        groups = f"; groups: {', '.join(GROUPS)}" if GROUPS else ""
        raise BlockError(f"unknown block {name!r}; known blocks: {', '.join(_BLOCKS)}{groups}")
    return _BLOCKS[name]


def all_blocks():
    return list(_BLOCKS.values())


# -- FP units ----------------------------------------------------------------------------------

#: Every operand format of some PE mode (the multiplier's format choices).
OPERAND_FORMATS = operand_formats(MODES)

_LANES = Param(
    "lanes",
    int,
    8,
    "parallel copies behind one stream (simulation throughput)",
    minimum=1,
    maximum=64,
)


def _lanes(factory, lanes):
    from ncrtl.hdl.common.stream import StreamLanes

    return StreamLanes(factory, lanes)


def _make_mul(fmt_a, fmt_b, lanes):
    from ncrtl.hdl.fp.mul import ExactMul

    return _lanes(lambda: ExactMul([fmt_a], [fmt_b]), lanes)


def _make_dot_add(mode, lanes):
    from ncrtl.hdl.fp.dot_add import FusedDotAdd

    return _lanes(lambda: FusedDotAdd.for_mode(get_mode(mode)), lanes)


def _make_add(lanes):
    from ncrtl.hdl.fp.add import Fp32Add

    return _lanes(Fp32Add, lanes)


def _make_bf16(lanes):
    from ncrtl.hdl.fp.convert import Fp32ToBf16

    return _lanes(Fp32ToBf16, lanes)


def _make_fp16(lanes):
    from ncrtl.hdl.fp.convert import Fp32ToFp16

    return _lanes(Fp32ToFp16, lanes)


def _make_xorwow(lanes):
    from ncrtl.hdl.fp.xorwow import Xorwow

    return _lanes(Xorwow, lanes)


def _mul_stimulus(count, fmt_a, fmt_b, lanes):
    from ncrtl.model.fp import get_format

    fa, fb = get_format(fmt_a), get_format(fmt_b)
    if fa.bits <= 8 and fb.bits <= 8:
        return (
            f"every code pair, {(1 << fa.bits) * (1 << fb.bits):,} vectors (exhaustive: --count "
            f"does not apply)"
        )
    return f"the corner cross product and {count} random pairs"


def _dot_add_stimulus(count, mode, lanes):
    m = get_mode(mode)
    pairs = len(m.formats_s) * len(m.formats_m)
    per = max(1, count // pairs)
    return (
        f"for each of the {pairs} format pair(s): a corner block (every code pair for equal "
        f"FP8/FP4 formats) and {per} random vectors (--count / pairs)"
    )


register(
    Block(
        "fp.mul",
        "exact multiplier of two operand formats (with the decoders)",
        (
            Param("fmt_a", str, "fp8_e4m3", "format of operand a", OPERAND_FORMATS),
            Param("fmt_b", str, "fp8_e4m3", "format of operand b", OPERAND_FORMATS),
            _LANES,
        ),
        _make_mul,
        lambda fmt_a, fmt_b, lanes: f"fp_mul_{fmt_a}_{fmt_b}",
        "ncrtl.testbench.fp.test_mul",
        stimulus=_mul_stimulus,
    )
)
register(
    Block(
        "fp.dot_add",
        "fused dot-product-add into FP32, one rounding (1, 2 or 4 products)",
        (
            Param(
                "mode",
                str,
                "bf16",
                "PE mode (the mode table): operand formats, products per step, MX scale",
                tuple(m.name for m in MODES),
            ),
            _LANES,
        ),
        _make_dot_add,
        lambda mode, lanes: f"fp_dot_add_{mode}",
        "ncrtl.testbench.fp.test_dot_add",
        stimulus=_dot_add_stimulus,
    )
)
register(
    Block(
        "fp.add",
        "FP32 adder, one rounding",
        (_LANES,),
        _make_add,
        lambda lanes: "fp_add",
        "ncrtl.testbench.fp.test_add",
        stimulus=lambda count, lanes: (
            f"the FP32 corner cross product, then {count} vectors: near-cancelling, aligned and "
            f"random pairs"
        ),
    )
)
register(
    Block(
        "fp.bf16",
        "FP32 -> BF16 converter, RNE or stochastic rounding",
        (_LANES,),
        _make_bf16,
        lambda lanes: "fp_to_bf16",
        "ncrtl.testbench.fp.test_convert",
        stimulus=lambda count, lanes: (
            f"every BF16 value with 6 low halves, then {count} random FP32 encodings"
        ),
    )
)
register(
    Block(
        "fp.fp16",
        "FP32 -> FP16 converter, RNE",
        (_LANES,),
        _make_fp16,
        lambda lanes: "fp_to_fp16",
        "ncrtl.testbench.fp.test_convert",
        stimulus=lambda count, lanes: (
            f"every BF16 value with 6 low halves, then {count} random FP32 encodings"
        ),
    )
)
register(
    Block(
        "fp.xorwow",
        "XORWOW pseudo-random generator (stochastic-rounding bits)",
        (
            Param(
                "lanes", int, 4, "independent generators behind one stream", minimum=1, maximum=64
            ),
        ),
        _make_xorwow,
        lambda lanes: "fp_xorwow",
        "ncrtl.testbench.fp.test_xorwow",
        stimulus=lambda count, lanes: (
            f"{max(1, count // lanes)} random load / step beats on each of the {lanes} generators"
        ),
    )
)

# -- Tensor Engine ------------------------------------------------------------------------------

#: Tensor Engine operations (a mode's matmul or transpose: ``ncrtl.model.modes.operations``).
TE_MODES = operations()

#: The conformance program of sparse matmuls (every sparse mode and ratio, on an engine built
#: with ``sparse=1``): ``pe_array``'s ``mode`` takes it beside the operations.
TE_SPARSE = "sparse"


#: Verilator arguments of a Tensor Engine build: its tiles as hierarchical blocks.
_TE_SIM_ARGS = ("--hierarchical", str(TE_VERILATOR_CONFIG))


def _check_engine(name, rows, cols, block, tile_unit):
    """The engine-size rules of a block holding a Tensor Engine (``pe_array``, ``core``)."""
    if block and (rows % block or cols % block or tile_unit % block):
        raise BlockError(
            f"{name}: parameter block={block} must divide rows={rows}, "
            f"cols={cols} and the column tile granule tile_unit={tile_unit}"
        )
    if cols > 4 * tile_unit:
        raise BlockError(
            f"{name}: parameter tile_unit={tile_unit} is too small for cols={cols} "
            f"(column tiles start at multiples of tile_unit; at most 4 per row)"
        )


def _pe_modes(spec, name="pe_array"):
    """The PeModes the PE is built for (``pe_modes=spec``, ``ncrtl.model.modes.pe_modes``)."""
    from ncrtl.model.modes import pe_modes

    try:
        return pe_modes(spec)
    except ValueError as e:
        raise BlockError(f"{name}: parameter {e}") from None


def _te_modes(mode, spec, name="pe_array"):
    """The PeModes of ``pe_modes=spec``, checked to serve the conformance program's ``mode``."""
    from ncrtl.model.modes import operation

    modes = _pe_modes(spec, name)
    if mode == TE_SPARSE:
        if not any(m.sparse for m in modes):
            raise BlockError(
                f"pe_array: parameter pe_modes={spec!r} has no mode with sparse matmuls "
                f"(mode={mode!r}); its modes: {', '.join(m.name for m in modes)}"
            )
        return modes
    if operation(mode)[0] not in modes:
        raise BlockError(
            f"{name}: parameter pe_modes={spec!r} does not serve mode={mode!r} (the "
            f"conformance program's); its modes: {', '.join(m.name for m in modes)}"
        )
    return modes


def _te_program_modes(mode, **_):
    """The engine modes of a ``pe_array`` or ``core`` program of ``mode``: the operation's
    mode, every mode with sparse matmuls for ``mode=sparse``."""
    from ncrtl.model.modes import SPARSE_MODES, operation

    if mode == TE_SPARSE:
        return tuple(m.name for m in SPARSE_MODES)
    return (operation(mode)[0].name,)


def _modes_suffix(spec):
    """The top name's part naming the PE's modes: none for every mode."""
    from ncrtl.model.modes import ENGINE_MODES

    modes = _pe_modes(spec)
    return "" if modes == ENGINE_MODES else "_m" + "_".join(m.name for m in modes)


def _check_te(
    rows,
    cols,
    mode,
    max_n,
    block,
    tile_unit=32,
    parallel_tiles=0,
    background_transpose=0,
    pe_modes="all",
    pgo=0,
    sparse=0,
):
    """The combinations a ``pe_array`` cannot run (:attr:`Block.check`)."""
    _check_engine("pe_array", rows, cols, block, tile_unit)
    if mode == TE_SPARSE and not sparse:
        raise BlockError("pe_array: mode=sparse needs the PEs' sparse path: parameter sparse=1")
    if sparse and rows % 4:
        raise BlockError(
            f"pe_array: parameter sparse=1 needs rows a multiple of 4 (the groups of 4 "
            f"compressed rows), not rows={rows}"
        )
    for other, value in (
        ("parallel_tiles", parallel_tiles),
        ("background_transpose", background_transpose),
    ):
        if sparse and value:
            raise BlockError(
                f"pe_array: parameters sparse=1 and {other}=1 cannot be combined: the sparse "
                f"path is built for the serial engine"
            )
    if sparse and not any(m.sparse for m in _pe_modes(pe_modes)):
        raise BlockError(
            f"pe_array: parameter sparse=1 needs a mode with sparse matmuls in "
            f"pe_modes={pe_modes!r}"
        )
    if parallel_tiles and (rows % tile_unit or cols % tile_unit):
        raise BlockError(
            f"pe_array: parameter parallel_tiles=1 needs rows={rows} and cols={cols} to be "
            f"multiples of tile_unit={tile_unit} (whole PE groups)"
        )
    _te_modes(mode, pe_modes)
    if parallel_tiles and background_transpose:
        raise BlockError(
            "pe_array: parameters parallel_tiles=1 and background_transpose=1 cannot be "
            "combined: the background plane is built for the serial engine"
        )


def _check_te_program(rows, cols, mode, tile_unit=32, **_):
    """The engines a ``pe_array`` conformance program of ``mode`` cannot run on."""
    if mode == TE_SPARSE:
        return  # K in groups of 4 rows: sparse=1 needs rows a multiple of 4 (_check_te)
    pe_mode, _ = operation(mode)
    step = pe_mode.k_step(tile_unit)
    if step > rows:
        fits = next(t for t in (32, 16, 8, 4, 2, 1) if pe_mode.k_step(t) <= rows)
        raise BlockError(
            f"pe_array: mode={mode} takes K in multiples of {step} partitions at "
            f"tile_unit={tile_unit}, more than rows={rows}: none of its instructions fits "
            f"(tile_unit={fits} or less does)"
        )
    if pe_mode.m_multiple > cols:
        raise BlockError(
            f"pe_array: mode={mode} takes M in multiples of {pe_mode.m_multiple}, more than "
            f"cols={cols}"
        )


def _make_te(
    rows,
    cols,
    block,
    tile_unit=32,
    parallel_tiles=0,
    background_transpose=0,
    pe_modes="all",
    sparse=0,
):
    from ncrtl.hdl.tensor_engine.array import default_block
    from ncrtl.hdl.tensor_engine.top import TensorEngine

    _check_engine("pe_array", rows, cols, block, tile_unit)
    return TensorEngine(
        rows,
        cols,
        tile_unit=tile_unit,
        block=block or default_block(rows, cols, tile_unit),
        parallel_tiles=bool(parallel_tiles),
        background_transpose=bool(background_transpose),
        modes=_pe_modes(pe_modes),
        sparse=bool(sparse),
    )


def _te_stimulus(count, mode, max_n, background_transpose=0, parallel_tiles=0, **_):
    n = min(1024, max(1, max_n))
    groups = max(1, count // (2 * n))
    if mode == TE_SPARSE:
        return (
            f"two random sparse programs (without and with stalls), each {groups} group(s) of "
            f"a sparse LS (a random sparse mode, formats, ratio 2, 3 or 4, K a multiple of 4, "
            f"valid tags) + up to 3 MMs of N <= {min(n, 512)}, dense pairs and illegal "
            f"instructions (SPARSE, MODE_MISMATCH, K_RANGE) mixed in"
        )
    if background_transpose:
        what = f"{max(2, min(12, groups))} groups of {mode} matmuls and transposes on both planes"
    elif parallel_tiles:
        what = f"{max(1, min(4, groups))} LS + MM pair(s) per tile of a tiling, side by side"
    else:
        what = f"{groups} random group(s) of LS + up to 3 MMs of N <= {n}"
    return (
        f"two random {mode} programs (without and with stalls), each {what}, illegal "
        f"instructions mixed in (--count / (2 x max_n) groups)"
    )


def _te_training(params, player):
    """The training run of a profile-guided engine build: with stream players (the build of
    ``ncrtl sim matmul`` and ``ncrtl bench``), one K = rows, M = cols, N = 512 matmul of the
    ``mode`` parameter streamed as ``ncrtl sim matmul`` streams it; without, the conformance
    program of two groups (its runs without and with stalls, errors mixed in)."""
    if player:
        shape = {"k": params["rows"], "m": params["cols"], "n": 512, "repeat": 1}
        return "ncrtl.testbench.tensor_engine.test_sim", {"NCRTL_MATMUL": json.dumps(shape)}
    return "ncrtl.testbench.tensor_engine.test_tensor_engine", {
        "NCRTL_COUNT": str(4 * params["max_n"])
    }


def _big_array_threads(rows, cols, **_):
    """Simulation threads of an engine: 2 from 64 x 64 PEs up (a 32 x 32 engine runs 1.55x
    faster on 2 threads than on 1; small arrays stay single-threaded so that parallel test
    workers do not oversubscribe the cores, which costs a threaded model about 25%)."""
    return 2 if rows * cols >= 64 * 64 else 1


def _te_top(
    rows,
    cols,
    block,
    tile_unit=32,
    parallel_tiles=0,
    background_transpose=0,
    pe_modes="all",
    sparse=0,
):
    return (
        f"tensor_engine_{rows}x{cols}"
        + (f"_b{block}" if block else "")
        + (f"_u{tile_unit}" if tile_unit != 32 else "")
        + ("_par" if parallel_tiles else "")
        + ("_bg" if background_transpose else "")
        + _modes_suffix(pe_modes)
        + ("_sp" if sparse else "")
    )


register(
    Block(
        "pe_array",
        "Tensor Engine: rows x cols systolic PE array with its LS/MM control",
        (
            Param("rows", int, 128, "PE rows (contraction partitions)", minimum=2, maximum=128),
            Param("cols", int, 128, "PE columns (output partitions)", minimum=2, maximum=128),
            Param(
                "mode",
                str,
                "bf16",
                "conformance program mode (the hardware serves every mode; sparse: sparse "
                "matmuls of every sparse mode and ratio, on an engine with sparse=1)",
                TE_MODES + (TE_SPARSE,),
                role="program",
            ),
            Param(
                "max_n",
                int,
                96,
                "largest moving free size N of the conformance program (above 512: MX "
                "instructions with a BF16 result)",
                minimum=1,
                maximum=1024,
                role="program",
            ),
            Param(
                "block",
                int,
                0,
                "PEs per side of the Verilog tile module (0: the default, 8 when "
                "it divides the array)",
                choices=(0, 1, 2, 4, 8, 16, 32),
            ),
            Param(
                "tile_unit",
                int,
                32,
                "tile sizes tile_unit and 2 x tile_unit, MX K granule tile_unit (32 on the "
                "hardware; smaller lets small arrays run tiles and MX)",
                choices=(1, 2, 4, 8, 16, 32),
            ),
            Param(
                "parallel_tiles",
                int,
                0,
                "1: tiles run side by side (a stream per lane group, results per output tap; "
                "the conformance program interleaves the tiles of a tiling); 0: one after another",
                choices=(0, 1),
            ),
            Param(
                "background_transpose",
                int,
                0,
                "1: the background transpose plane of NeuronCore-v4 (a stream of each per "
                "plane, results per plane; the conformance program mixes the mode's matmuls "
                "and transposes); not with parallel_tiles=1",
                choices=(0, 1),
            ),
            Param(
                "pe_modes",
                str,
                "all",
                "the modes the PE is built for: all (the synthesis design), a family (bf16: "
                "bf16+fp16, fp8: fp8+double_row, fp32: fp32+tf32, mx) or mode names joined by "
                "'+' or ','; fewer modes simulate faster, another mode's instruction is an "
                "error (MODE)",
            ),
            Param(
                "pgo",
                int,
                0,
                "1: a profile-guided simulation build (compiled instrumented, trained on a "
                "matmul stream of the mode, compiled again with the profile: about twice the "
                "build time, a faster simulation); the same hardware",
                choices=(0, 1),
                role="build",
            ),
            Param(
                "sparse",
                int,
                0,
                "1: the PEs' sparse path (nc_matmul_sparse: a moving word of up to 4 elements "
                "per row, each PE's operand picked from its row group's words by its tag; rows "
                "a multiple of 4, the serial engine); needed by mode=sparse",
                choices=(0, 1),
            ),
        ),
        _make_te,
        _te_top,
        "ncrtl.testbench.tensor_engine.test_tensor_engine",
        sim_args=_TE_SIM_ARGS,
        threads=_big_array_threads,
        stimulus=_te_stimulus,
        training=_te_training,
        check=_check_te,
        program_check=_check_te_program,
        program_modes=_te_program_modes,
        runner="ncrtl.testbench.tensor_engine.loop_run:run_conformance_on_bands",
    )
)

# -- PSUM -----------------------------------------------------------------------------------------


def _make_psum(partitions, banks, bank_bytes):
    from ncrtl.hdl.psum.psum import Psum

    return Psum(partitions, banks, bank_bytes, instance=True)


register(
    Block(
        "psum",
        "PSUM: partial-sum banks with the read-add-write unit and two engine ports",
        (
            Param(
                "partitions",
                int,
                128,
                "partitions (one 32-bit slot each per memory word)",
                minimum=1,
                maximum=128,
            ),
            Param("banks", int, 8, "banks (one access per cycle each)", minimum=1, maximum=16),
            Param(
                "bank_bytes",
                int,
                2048,
                "bytes per partition per bank",
                tuple(1 << k for k in range(3, 13)),
            ),
        ),
        _make_psum,
        lambda partitions, banks, bank_bytes: f"psum_{partitions}x{banks}x{bank_bytes}",
        "ncrtl.testbench.psum.test_psum",
        stimulus=lambda count, **_: (
            f"a random program of {max(50, count)} Tensor Engine beats (at least 50) with engine "
            f"requests and seed loads, then fixed latency, rate and contention phases"
        ),
    )
)

# -- DMA ------------------------------------------------------------------------------------------


def _check_words(block, partition_bytes, word_bytes):
    if partition_bytes % word_bytes:
        raise BlockError(
            f"{block}: parameter partition_bytes={partition_bytes} must be a multiple of "
            f"word_bytes={word_bytes}"
        )


def dma_widths(hbm_bytes, partitions, **_):
    """Descriptor field widths of a ``dma`` block: addresses of its device memory, 16-bit nums,
    partition numbers of its SBUF."""
    from ncrtl.hdl.dma.check import Widths

    return Widths.for_memories(hbm_bytes, partitions)


#: The smallest memories the DMA conformance programs (``ncrtl.testbench.dma.program``: up to
#: 8-row tiles, rows of up to 64 bytes, a region of the device memory and of every partition
#: per queue, 256 bytes of dynamic offsets at the top of the device memory) run in.
DMA_PROGRAM_MINIMUM = {"partitions": 8, "partition_bytes": 128, "hbm_bytes": 2048}


def _check_dma_program(block):
    def check(**params):
        for name, least in DMA_PROGRAM_MINIMUM.items():
            if params[name] < least:
                raise BlockError(
                    f"{block}: the conformance program needs {name} >= {least} (got "
                    f"{params[name]}): its random descriptors use tiles of up to 8 partitions "
                    f"of 64-byte rows, a region per queue and 256 bytes of dynamic offsets; "
                    f"the design itself builds (ncrtl verilog)"
                )

    return check


#: The SBUF geometry parameters of the DMA blocks (``dma``, ``dma_queues``, ``sendrecv``).
_SBUF_PARAMS = (
    Param("partitions", int, 128, "SBUF partitions", minimum=1, maximum=128),
    Param(
        "partition_bytes",
        int,
        192 * 1024,
        "SBUF bytes per partition (192 / 224 / 256 KiB on NeuronCore-v2/v3/v4)",
        minimum=4,
        maximum=256 * 1024,
    ),
)

#: The parameters a DMA engine block starts with (``dma``, ``dma_queues``).
_DMA_PARAMS = (
    Param("word_bytes", int, 16, "data path and AXI4 data width, bytes", (4, 8, 16, 32, 64)),
    *_SBUF_PARAMS,
    Param(
        "hbm_bytes",
        int,
        1 << 20,
        "device memory bytes behind the AXI4 port (at most 256 MiB: the testbench and the "
        "golden hold it in host memory, several copies)",
        minimum=64,
        maximum=1 << 28,
    ),
    Param(
        "overhead",
        int,
        8,
        "cycles between a descriptor's check and its first access",
        minimum=0,
        maximum=1 << 16,
    ),
)


def _make_dma(word_bytes, partitions, partition_bytes, hbm_bytes, overhead, outstanding, burst):
    from ncrtl.hdl.dma.top import DmaSystem

    _check_words("dma", partition_bytes, word_bytes)
    return DmaSystem(
        word_bytes,
        widths=dma_widths(hbm_bytes, partitions),
        partitions=partitions,
        partition_bytes=partition_bytes,
        hbm_bytes=hbm_bytes,
        overhead=overhead,
        outstanding=outstanding,
        burst=burst,
        instance=True,
    )


#: A DMA engine's most beats per device-memory read burst (the rule: ``check_burst``).
_BURST_PARAM = Param(
    "burst", int, 16, "most beats of a device-memory read burst", minimum=1, maximum=256
)


def _check_dma(block):
    """A block's check of its DMA engines' parameters: whole words, a legal burst."""

    def check(partition_bytes, word_bytes, burst, **_):
        from ncrtl.model.dma.timing import check_burst

        _check_words(block, partition_bytes, word_bytes)
        try:
            check_burst(burst, word_bytes, f"{block}: parameter")
        except ValueError as e:
            raise BlockError(str(e)) from None

    return check


register(
    Block(
        "dma",
        "DMA engine with its SBUF: copies, DMA transposes, SBUF read-add-write; AXI4 to HBM",
        (
            *_DMA_PARAMS,
            Param("outstanding", int, 8, "reads (bursts) in flight", minimum=1, maximum=64),
            _BURST_PARAM,
        ),
        _make_dma,
        lambda word_bytes, partitions, partition_bytes, hbm_bytes, overhead, outstanding, burst: (
            f"dma_w{word_bytes}_{partitions}x{partition_bytes}_h{hbm_bytes}"
        ),
        "ncrtl.testbench.dma.test_dma",
        check=_check_dma("dma"),
        program_check=_check_dma_program("dma"),
        stimulus=lambda count, **_: (
            f"{max(1, min(count, 400))} random descriptors (--count, at most 400)"
        ),
    )
)


def _make_dma_queues(
    word_bytes, partitions, partition_bytes, hbm_bytes, overhead, outstanding, burst, policy, depth
):
    from ncrtl.hdl.dma.top import DmaQueuesSystem

    _check_words("dma_queues", partition_bytes, word_bytes)
    return DmaQueuesSystem(
        word_bytes,
        policy=policy,
        depth=depth,
        widths=dma_widths(hbm_bytes, partitions),
        partitions=partitions,
        partition_bytes=partition_bytes,
        hbm_bytes=hbm_bytes,
        overhead=overhead,
        outstanding=outstanding,
        burst=burst,
        instance=True,
    )


register(
    Block(
        "dma_queues",
        "a DMA engine's 16 queues: round robin, or a channel per class of service (strict "
        "priority, traffic shaping) sharing the AXI4 and SBUF ports",
        (
            *_DMA_PARAMS,
            Param(
                "outstanding", int, 8, "reads (bursts) in flight per channel", minimum=1, maximum=64
            ),
            _BURST_PARAM,
            Param(
                "policy",
                str,
                "priority",
                "between queues: priority (NeuronCore-v4 QoS) or round_robin (v2/v3)",
                ("priority", "round_robin"),
            ),
            Param("depth", int, 4, "descriptors each queue holds", minimum=1, maximum=64),
        ),
        _make_dma_queues,
        lambda word_bytes, partitions, partition_bytes, hbm_bytes, overhead, outstanding, burst, policy, depth: (
            f"dma_queues_{policy}_w{word_bytes}_{partitions}x{partition_bytes}_h{hbm_bytes}"
        ),
        "ncrtl.testbench.dma.test_dma_queues",
        check=_check_dma("dma_queues"),
        program_check=_check_dma_program("dma_queues"),
        stimulus=lambda count, **_: (
            f"about {max(1, min(count, 400))} random descriptors over the 16 queues (--count, at "
            f"most 400)"
        ),
    )
)


def _sendrecv_stimulus(count, pipes, depth, **_):
    return (
        f"up to {count} random sendrecv pairs (--count; fewer when the pipe queues, {pipes} x "
        f"{depth}, or the SBUF hold fewer) and one without a partner"
    )


#: Bytes per partition of one destination slot of the sendrecv conformance program: its
#: sources lie in the lower half of each SBUF, each pair's destination in its own slot of the
#: upper half (so the result does not depend on the order the pairs run in).
SENDRECV_SLOT = 16


def sendrecv_pairs(partition_bytes, pipes, depth):
    """Most sendrecv pairs the conformance program holds: one pipe slot is kept for the
    unpaired sendrecv that closes it, and the upper half of a partition holds a slot for every
    pair and one more."""
    return min(pipes * depth - 1, partition_bytes // 2 // SENDRECV_SLOT - 1)


def _check_sendrecv(word_bytes, partitions, partition_bytes, pipes, depth):
    """The combinations a ``sendrecv`` cannot be built with (:attr:`Block.check`)."""
    _check_words("sendrecv", partition_bytes, word_bytes)
    if pipes & (pipes - 1):
        raise BlockError(f"sendrecv: parameter pipes={pipes} must be a power of two")


def _check_sendrecv_program(partition_bytes, pipes, depth, **_):
    """The ``sendrecv`` designs its conformance program cannot run on (:func:`sendrecv_pairs`
    < 1)."""
    if partition_bytes < 4 * SENDRECV_SLOT:
        raise BlockError(
            f"sendrecv: the conformance program needs room for one pair: partition_bytes="
            f"{partition_bytes} must be at least {4 * SENDRECV_SLOT} (sources in the lower "
            f"half, {SENDRECV_SLOT}-byte destination slots in the upper, one for the pair and "
            f"one more)"
        )
    if pipes * depth < 2:
        raise BlockError(
            f"sendrecv: the conformance program needs pipes x depth = {pipes * depth} to be at "
            f"least 2 (a pair and the unpaired sendrecv that closes the program)"
        )


def _make_sendrecv(word_bytes, partitions, partition_bytes, pipes, depth):
    from ncrtl.hdl.dma.top import SendRecvPair

    _check_sendrecv(word_bytes, partitions, partition_bytes, pipes, depth)
    return SendRecvPair(
        word_bytes,
        partitions=partitions,
        partition_bytes=partition_bytes,
        pipes=pipes,
        depth=depth,
        instance=True,
    )


register(
    Block(
        "sendrecv",
        "the two cores of an LNC = 2 logical core, each a sendrecv unit on its SBUF, linked: "
        "SBUF-to-SBUF exchange paired by pipe",
        (
            Param("word_bytes", int, 8, "SBUF word and link data width, bytes", (4, 8, 16, 32, 64)),
            *_SBUF_PARAMS,
            Param("pipes", int, 4, "pipe ids, a power of two", minimum=1, maximum=16),
            Param("depth", int, 4, "sendrecvs each pipe's queue holds", minimum=1, maximum=16),
        ),
        _make_sendrecv,
        lambda word_bytes, partitions, partition_bytes, pipes, depth: (
            f"sendrecv_w{word_bytes}_{partitions}x{partition_bytes}_p{pipes}"
        ),
        "ncrtl.testbench.dma.test_sendrecv",
        stimulus=_sendrecv_stimulus,
        check=_check_sendrecv,
        program_check=_check_sendrecv_program,
    )
)

# -- The matmul path: Tensor Engine -> PSUM -----------------------------------------------------

#: Operations of the matmul path: a transpose writes raw 16-bit words into PSUM.
CORE_MODES = operations(max_transpose_bits=16)


def _check_core(
    rows,
    cols,
    banks,
    bank_bytes,
    mode,
    psum,
    rounding,
    chunks,
    n,
    bank,
    block,
    tile_unit=32,
    pe_modes="all",
):
    """The combinations a ``core`` cannot run (:attr:`Block.check`)."""
    _check_engine("core", rows, cols, block, tile_unit)
    _te_modes(mode, pe_modes, "core")
    if bank >= banks:
        raise BlockError(
            f"core: parameter bank={bank} is out of range; PSUM has banks 0..{banks - 1}"
        )
    pe_mode, transpose = operation(mode)
    if pe_mode.k_step(tile_unit) > rows or rows % pe_mode.k_step(tile_unit):
        raise BlockError(
            f"core: mode={mode} needs K = rows={rows} to be a multiple of "
            f"{pe_mode.k_step(tile_unit)} partitions at tile_unit={tile_unit} "
            f"(set tile_unit to a divisor of rows)"
        )
    if cols % pe_mode.m_multiple:
        raise BlockError(f"core: mode={mode} needs M = cols={cols} to be even")
    cap = bank_bytes // 4 * (1 if psum == "fp32" and not transpose else 2)
    if n > cap:
        raise BlockError(
            f"core: parameter n={n} does not fit a bank row of {cap} "
            f"{psum if not transpose else 'raw16'} values "
            f"(bank_bytes={bank_bytes})"
        )
    limit = pe_mode.n_limit(psum == "bf16" and not transpose)
    if n > limit:
        raise BlockError(
            f"core: parameter n={n} is above the {mode} limit of {limit} with a {psum} result"
        )
    if rounding == "sr" and psum != "bf16":
        raise BlockError("core: parameter rounding=sr needs psum=bf16")


def _make_core(rows, cols, banks, bank_bytes, block, tile_unit=32, pe_modes="all"):
    from ncrtl.hdl.core.top import MatmulCore
    from ncrtl.hdl.tensor_engine.array import default_block

    _check_engine("core", rows, cols, block, tile_unit)
    return MatmulCore(
        rows,
        cols,
        banks,
        bank_bytes,
        tile_unit=tile_unit,
        block=block or default_block(rows, cols, tile_unit),
        modes=_pe_modes(pe_modes, "core"),
    )


def _core_top(rows, cols, banks, bank_bytes, block, tile_unit=32, pe_modes="all"):
    return (
        f"matmul_core_{rows}x{cols}_{banks}x{bank_bytes}"
        + (f"_b{block}" if block else "")
        + (f"_u{tile_unit}" if tile_unit != 32 else "")
        + _modes_suffix(pe_modes)
    )


register(
    Block(
        "core",
        "matmul path: Tensor Engine output vectors accumulated in PSUM (chunked matmul)",
        (
            Param("rows", int, 128, "PE rows", minimum=2, maximum=128),
            Param("cols", int, 128, "PE columns = PSUM partitions", minimum=2, maximum=128),
            Param("banks", int, 8, "PSUM banks", minimum=1, maximum=16),
            Param(
                "bank_bytes",
                int,
                2048,
                "PSUM bytes per partition per bank",
                tuple(1 << k for k in range(3, 13)),
            ),
            Param(
                "mode", str, "bf16", "Tensor Engine mode of the program", CORE_MODES, role="program"
            ),
            Param(
                "psum",
                str,
                "fp32",
                "PSUM dtype of the accumulation group",
                ("fp32", "bf16"),
                role="program",
            ),
            Param("rounding", str, "rne", "BF16 PSUM rounding", ("rne", "sr"), role="program"),
            Param(
                "chunks",
                int,
                4,
                "matmuls (of K = rows) accumulated in one group",
                minimum=1,
                maximum=64,
                role="program",
            ),
            Param(
                "n",
                int,
                64,
                "moving free size N of each matmul (MX with psum=bf16: up to 1024)",
                minimum=1,
                maximum=1024,
                role="program",
            ),
            Param("bank", int, 0, "PSUM bank of the group", minimum=0, maximum=15, role="program"),
            Param(
                "block",
                int,
                0,
                "PEs per side of the Verilog tile module (0: the default)",
                choices=(0, 1, 2, 4, 8, 16, 32),
            ),
            Param(
                "tile_unit",
                int,
                32,
                "Tensor Engine tile sizes tile_unit and 2 x tile_unit, MX K granule tile_unit "
                "(32 on the hardware; mx on arrays under 32 rows needs it at most rows)",
                choices=(1, 2, 4, 8, 16, 32),
            ),
            Param(
                "pe_modes",
                str,
                "all",
                "the modes the PE is built for (as pe_array's pe_modes; all: the synthesis design)",
            ),
        ),
        _make_core,
        _core_top,
        "ncrtl.testbench.core.test_core",
        sim_args=_TE_SIM_ARGS,
        threads=_big_array_threads,
        check=_check_core,
        program_modes=_te_program_modes,
        stimulus=lambda count, chunks, n, **_: (
            f"one random chunked matmul: {chunks} x (LS + MM, N = {n}) accumulated in one PSUM "
            f"group and read back (its size is the block's chunks and n: --count does not apply)"
        ),
    )
)

_MUL_PAIRS = [(f, f) for f in OPERAND_FORMATS] + [
    ("fp8_e4m3", "fp8_e5m2"),
    ("fp8_e5m2", "fp8_e4m3fn"),
]

#: Named sets of configurations.
GROUPS = {
    "fp": (
        [("fp.mul", {"fmt_a": a, "fmt_b": b}) for a, b in _MUL_PAIRS]
        + [("fp.dot_add", {"mode": m.name}) for m in MODES]
        + [("fp.add", {}), ("fp.bf16", {}), ("fp.fp16", {}), ("fp.xorwow", {})]
    ),
    # MX needs K a multiple of tile_unit (32 on the hardware): its small arrays scale it down.
    "tensor_engine": [
        ("pe_array", {"rows": r, "cols": c, "mode": m, **({"tile_unit": r} if m == "mx" else {})})
        for m in TE_MODES
        for r, c in ((4, 4), (8, 8))
    ]
    # MX with a BF16 result reaches N = 1024.
    + [("pe_array", {"rows": 4, "cols": 4, "mode": "mx", "tile_unit": 4, "max_n": 1024})]
    # Sparse matmuls on the sparse path: two row groups, every sparse mode and ratio.
    + [("pe_array", {"rows": 8, "cols": 8, "mode": TE_SPARSE, "sparse": 1})],
    "dma": [
        ("dma", {"word_bytes": w, "partitions": p, "partition_bytes": n, "hbm_bytes": h})
        for w, p, n, h in ((8, 8, 256, 4096), (16, 16, 512, 8192))
    ],
    "dma_queues": [
        (
            "dma_queues",
            {
                "word_bytes": 8,
                "partitions": 8,
                "partition_bytes": 256,
                "hbm_bytes": 4096,
                "outstanding": 4,
                "policy": p,
            },
        )
        for p in ("priority", "round_robin")
    ],
    "sendrecv": [
        ("sendrecv", {"word_bytes": w, "partitions": 16, "partition_bytes": 512}) for w in (4, 8)
    ],
    "psum": [
        ("psum", {"partitions": p, "banks": b, "bank_bytes": n})
        for p, b, n in ((4, 4, 64), (8, 8, 128), (16, 8, 2048))
    ],
    # K = 4 x 8 = 32 as four accumulated matmuls on an 8 x 8 engine, in FP32 and BF16 PSUM (MX:
    # tile_unit 8, so that K = 8 is a whole number of scale groups).
    "core": [
        (
            "core",
            {
                "rows": 8,
                "cols": 8,
                "banks": 4,
                "bank_bytes": 256,
                "mode": m,
                "psum": p,
                "rounding": r,
                "bank": 2,
                **({"tile_unit": 8} if m == "mx" else {}),
            },
        )
        for m, p, r in (
            ("bf16", "fp32", "rne"),
            ("bf16", "bf16", "rne"),
            ("bf16", "bf16", "sr"),
            ("fp32", "fp32", "rne"),
            ("double_row", "fp32", "rne"),
            ("fp8", "bf16", "sr"),
            ("mx", "fp32", "rne"),
            ("mx", "bf16", "rne"),
            ("mx", "bf16", "sr"),
            ("transpose_bf16", "fp32", "rne"),
        )
    ]
    # MX into BF16 PSUM with N = 1024: a whole 2 KiB bank row of BF16.
    + [
        (
            "core",
            {
                "rows": 4,
                "cols": 4,
                "banks": 2,
                "bank_bytes": 2048,
                "mode": "mx",
                "psum": "bf16",
                "chunks": 2,
                "n": 1024,
                "tile_unit": 4,
            },
        )
    ],
}

# -- Vector Engine: QuantizeMX ----------------------------------------------------------------


def _make_quantize_mx(groups):
    from ncrtl.hdl.vector_engine.quantize_mx import QuantizeMX

    return QuantizeMX(groups)


register(
    Block(
        "quantize_mx",
        "Vector Engine QuantizeMX: BF16/FP16 groups of 32 -> MXFP8/MXFP4 codes and E8M0 scales",
        (
            Param(
                "groups",
                int,
                16,
                "8-partition x 4-element groups per beat (16: 128 partitions, the hardware rate)",
                minimum=1,
                maximum=16,
            ),
        ),
        _make_quantize_mx,
        lambda groups: f"quantize_mx_g{groups}",
        "ncrtl.testbench.vector_engine.test_quantize_mx",
        stimulus=lambda count, **_: (
            f"for each of the 12 configurations: every 16-bit source code twice, the corner "
            f"groups and {max(1, count // 12)} random groups (--count / 12)"
        ),
    )
)

GROUPS["vector_engine"] = [("quantize_mx", {"groups": g}) for g in (1, 4)]

# -- The NeuronCore: DMA, SBUF, Tensor Engine, PSUM and eviction on instruction queues ---------

#: The NeuronCore's parameters (:class:`ncrtl.model.neuroncore.isa.Geometry`), in its order.
_NEURONCORE_GEOMETRY = (
    "partitions",
    "partition_bytes",
    "rows",
    "cols",
    "psum_banks",
    "psum_bank_bytes",
    "dma_engines",
    "dma_queues",
    "word_bytes",
    "hbm_bytes",
    "tile_unit",
    "version",
)


def neuroncore_geometry(params):
    """The :class:`~ncrtl.model.neuroncore.isa.Geometry` of a ``neuroncore``'s parameters (a
    dict; the others in it are ignored); its rules raise as :class:`BlockError`."""
    from ncrtl.model.neuroncore.isa import Geometry

    try:
        return Geometry(**{k: params[k] for k in _NEURONCORE_GEOMETRY})
    except ValueError as e:
        raise BlockError(f"neuroncore: {e}") from None


def _check_neuroncore(pe_modes="all", **hw):
    geo = neuroncore_geometry(hw)
    _check_engine("neuroncore", geo.rows, geo.cols, 0, geo.tile_unit)
    _pe_modes(pe_modes)


def _check_neuroncore_program(pe_modes="all", **hw):
    """The conformance kernels are BF16 / FP16 matmuls (the double-row and MX examples join
    them where the PEs have those modes)."""
    from ncrtl.model.modes import get_mode

    if get_mode("bf16") not in _pe_modes(pe_modes):
        raise BlockError(
            f"neuroncore: parameter pe_modes={pe_modes!r} does not serve the conformance "
            f"kernels' bf16 and fp16 matmuls"
        )


def _neuroncore_program_modes(version="v3", **hw):
    """The engine modes of the neuroncore conformance kernels on an all-mode core: the bf16 and
    fp16 matmuls, the double-row example (v3 on) and the MX one (v4's QuantizeMX)."""
    geo = neuroncore_geometry({**hw, "version": version})
    return (
        ("bf16", "fp16")
        + (("double_row",) if version != "v2" else ())
        + (("mx",) if geo.quantize_mx else ())
    )


def _make_neuroncore(
    partitions,
    partition_bytes,
    rows,
    cols,
    psum_banks,
    psum_bank_bytes,
    dma_engines,
    dma_queues,
    word_bytes,
    hbm_bytes,
    tile_unit,
    version,
    pe_modes,
):
    hw = dict(locals())
    _check_neuroncore(**hw)
    from ncrtl.hdl.neuroncore.top import NeuronCore

    return NeuronCore(neuroncore_geometry(hw), instance=True, modes=_pe_modes(pe_modes))


def _neuroncore_parts(pe_modes="all", **hw):
    """The core's own units (queues, TensorFeed, the Vector Engine, DmaIssue, the SBUF's engine
    ports): what its synthesis check covers; the Tensor Engine, PSUM, DMA engines, DGEs and
    SBUF have their own checks, and Yosys takes over half an hour on the whole flattened
    8-partition core."""
    from ncrtl.hdl.neuroncore.dma import DmaIssue
    from ncrtl.hdl.neuroncore.isa import op_layouts
    from ncrtl.hdl.neuroncore.queue import EngineQueue
    from ncrtl.hdl.neuroncore.tensor import TensorFeed
    from ncrtl.hdl.neuroncore.vector import VectorEngine
    from ncrtl.hdl.sbuf.engines import EnginePorts

    geo = neuroncore_geometry(hw)
    layouts = op_layouts(geo)
    parts = {
        "neuroncore_feed": TensorFeed(geo, mx=geo.version == "v4", double_row=True),
        "neuroncore_vector": VectorEngine(geo),
        "neuroncore_issue": DmaIssue(geo),
        "neuroncore_engine_ports": EnginePorts(
            2, geo.partitions, geo.partition_bytes // geo.word_bytes, geo.word_bytes
        ),
    }
    for s in ("tensor", "vector", "dma0"):
        parts[f"neuroncore_queue_{s}"] = EngineQueue(layouts[s], len(geo.streams()))
    return parts


def _neuroncore_top(
    partitions,
    partition_bytes,
    rows,
    cols,
    psum_banks,
    psum_bank_bytes,
    dma_engines,
    dma_queues,
    word_bytes,
    hbm_bytes,
    tile_unit,
    version,
    pe_modes,
):
    """``neuroncore``, then every parameter that is not the real core's (``_p8_r8_c8`` ...)."""
    from ncrtl.model.modes import ENGINE_MODES

    given = locals()
    short = {
        "partitions": "p",
        "partition_bytes": "sb",
        "rows": "r",
        "cols": "c",
        "psum_banks": "pb",
        "psum_bank_bytes": "pbb",
        "dma_engines": "de",
        "dma_queues": "dq",
        "word_bytes": "w",
        "hbm_bytes": "hbm",
        "tile_unit": "u",
        "version": "",
    }
    defaults = {p.name: p.default for p in _NEURONCORE_PARAMS}
    name = "neuroncore" + "".join(
        f"_{short[k]}{given[k]}" for k in _NEURONCORE_GEOMETRY if given[k] != defaults[k]
    )
    modes = _pe_modes(pe_modes)
    return name + ("" if modes == ENGINE_MODES else "_m" + "_".join(m.name for m in modes))


_NEURONCORE_PARAMS = (
    Param(
        "partitions",
        int,
        128,
        "SBUF partitions = PE columns = PSUM partitions",
        minimum=2,
        maximum=128,
    ),
    Param(
        "partition_bytes",
        int,
        224 * 1024,
        "SBUF bytes per partition (a multiple of word_bytes)",
        minimum=64,
        maximum=1 << 20,
    ),
    Param("rows", int, 128, "PE rows (contraction partitions), at most partitions", minimum=2),
    Param("cols", int, 128, "PE columns: equal to partitions", minimum=2, maximum=128),
    Param("psum_banks", int, 8, "PSUM banks", minimum=1, maximum=16),
    Param(
        "psum_bank_bytes",
        int,
        2048,
        "PSUM bytes per partition per bank",
        tuple(1 << k for k in range(3, 13)),
    ),
    Param("dma_engines", int, 16, "DMA engines, a power of two", minimum=1, maximum=16),
    Param("dma_queues", int, 16, "DMA queues (one instruction queue each), a power of two"),
    Param("word_bytes", int, 16, "SBUF word and AXI4 data width, bytes", (4, 8, 16, 32, 64)),
    Param(
        "hbm_bytes",
        int,
        1 << 24,
        "device memory bytes behind the DMA engines",
        minimum=1024,
        maximum=1 << 32,
    ),
    Param(
        "tile_unit",
        int,
        32,
        "Tensor Engine tile sizes tile_unit and 2 x tile_unit (32 on the hardware; at least "
        "cols / 4)",
        choices=(1, 2, 4, 8, 16, 32),
    ),
    Param(
        "version",
        str,
        "v3",
        "core version: v4 adds QuantizeMX to the Vector Engine (with partitions a multiple of 32)",
        choices=("v2", "v3", "v4"),
    ),
    Param(
        "pe_modes",
        str,
        "all",
        "the modes the PE is built for (as pe_array's pe_modes; all: the synthesis design)",
    ),
)

#: A small NeuronCore: 8 partitions, 8 x 8 PEs, 2 DMA engines, 4 DMA queues (the geometry of
#: the default test suite).
NEURONCORE_SMALL = {
    "partitions": 8,
    "partition_bytes": 2048,
    "rows": 8,
    "cols": 8,
    "psum_banks": 2,
    "psum_bank_bytes": 128,
    "dma_engines": 2,
    "dma_queues": 4,
    "hbm_bytes": 16384,
    "tile_unit": 2,
}
#: A NeuronCore-v4 of one quadrant: 32 partitions, 32 x 32 PEs, QuantizeMX in its Vector Engine
#: (the group builds its PEs with the bf16, double-row and MX modes).
NEURONCORE_V4_QUADRANT = {
    "partitions": 32,
    "partition_bytes": 2048,
    "rows": 32,
    "cols": 32,
    "psum_banks": 2,
    "psum_bank_bytes": 128,
    "dma_engines": 2,
    "dma_queues": 4,
    "hbm_bytes": 65536,
    "tile_unit": 8,
    "version": "v4",
}
register(
    Block(
        "neuroncore",
        "NeuronCore: instruction fetch and queues, DMA + SBUF, Tensor Engine + PSUM, Vector "
        "Engine (eviction; QuantizeMX on v4): a kernel's streams",
        _NEURONCORE_PARAMS,
        _make_neuroncore,
        _neuroncore_top,
        "ncrtl.testbench.neuroncore.test_neuroncore",
        sim_args=_TE_SIM_ARGS,
        threads=lambda rows, cols, **_: _big_array_threads(rows, cols),
        check=_check_neuroncore,
        program_check=_check_neuroncore_program,
        program_modes=_neuroncore_program_modes,
        synth_parts=_neuroncore_parts,
        follows=(("rows", "partitions"), ("cols", "partitions")),
        presets={"small": NEURONCORE_SMALL, "v4_quadrant": NEURONCORE_V4_QUADRANT},
        stimulus=lambda count, version="v3", **_: (
            "the shipped examples matmul_basic and matmul_tiled at the core's geometry, the "
            "evictions of special values"
            + (", the quantizations (QuantizeMX)" if version == "v4" else "")
            + ", matmul_fp8_double_row and matmul_mx where the PEs have their modes"
            + f", then {count} random kernels (--count), each from a reset"
        ),
    )
)

#: The ``neuroncore`` group: the small core, one of 16 partitions with an 8-byte SBUF word,
#: 4 DMA engines on 2 queues, 4 PSUM banks of 256 bytes and tile unit 4, and the v4 quadrant.
GROUPS["neuroncore"] = [
    ("neuroncore", {**NEURONCORE_SMALL, "pe_modes": "bf16"}),
    (
        "neuroncore",
        {
            "partitions": 16,
            "partition_bytes": 1024,
            "rows": 16,
            "cols": 16,
            "psum_banks": 4,
            "psum_bank_bytes": 256,
            "dma_engines": 4,
            "dma_queues": 2,
            "word_bytes": 8,
            "hbm_bytes": 65536,
            "tile_unit": 4,
            "pe_modes": "bf16",
        },
    ),
    ("neuroncore", {**NEURONCORE_V4_QUADRANT, "pe_modes": "bf16+double_row+mx"}),
]
