"""The DMA instructions (dma_copy's run-time offsets, oob_mode and priority, dma_transpose by
axes and indirect, dma_compute, get_nc_sub_version), the views' methods and NeuronCore-v4's
.indirect views (docs/nki/dma.md): values against numpy references written here, the costs
against their closed forms, one test per class of rule."""

import os

import ml_dtypes
import numpy as np
import pytest

import ncrtl.nki as nki
from ncrtl.kernels import load_file
from ncrtl.model.kernel import golden as kgolden
from ncrtl.model.kernel import timing as ktiming
from tests.kernel_lines import kernel_line

KERNELS = os.path.join(os.path.dirname(__file__), "kernels", "dma.py")


def _k(name):
    return load_file(KERNELS, name)


def _run(name, args, kwargs=None, core="v3", timing=False):
    return nki.run(_k(name), args, kwargs or {}, core=core, timing=timing)


def _out(name, args, kwargs=None, core="v3"):
    outs = _run(name, args, kwargs, core).outputs
    return outs[0] if len(outs) == 1 else outs


RNG = np.random.default_rng(5)
DATA = RNG.standard_normal((64, 16)).astype(np.float32)


# -- run-time offsets ----------------------------------------------------------------------------


def test_a_vector_offset_gathers_rows():
    """Partition p reads row idx[p] (repeats and any order allowed)."""
    idx = np.array([5, 3, 63, 0, 3, 17, 40, 41] * 4, np.int32).reshape(32, 1)
    got = _out("gather", (DATA, idx))
    assert got.tobytes() == DATA[idx[:, 0]].tobytes()


def test_a_gather_out_of_bounds_raises_or_is_skipped_by_row():
    """An index outside the table raises naming the line, the index tensor and the row; with
    oob_mode=skip that partition keeps what it held, the others are gathered."""
    idx = np.array([1, 64, -1, 2], np.int32).reshape(4, 1)
    with pytest.raises(kgolden.KernelError) as e:
        _out("gather", (DATA, idx))
    msg = str(e.value)
    assert "dma.py" in msg and "nisa.dma_copy" in msg and "row 1" in msg and "64" in msg
    got = _out("gather", (DATA, idx), {"skip": True})
    want = np.full((4, 16), -1, np.float32)
    want[0], want[3] = DATA[1], DATA[2]
    assert got.tobytes() == want.tobytes()


def test_a_vector_select_scatters_rows():
    """vector_select on the destination: partition p lands in row idx[p]; the rest stays 0."""
    src = RNG.standard_normal((8, 16)).astype(np.float32)
    idx = np.array([7, 0, 30, 2, 9, 11, 4, 31], np.int32).reshape(8, 1)
    got = _out("scatter", (src, idx), {"rows": 32})
    want = np.zeros((32, 16), np.float32)
    want[idx[:, 0]] = src
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dim", [0, 1, 2, 3])
def test_a_scalar_offset_moves_the_view(dim):
    """.ap(scalar_offset=, indirect_dim=0) on the table, indirect_dim=1 on the table
    reshaped [1, R, F] (the stride of the view ap is called on), a dynamic select, and a
    scalar offset held in a register (nisa.register_load): the rows from the run-time
    start."""
    rows = 1 if dim == 2 else 5
    got = _out("scalar_rows", (DATA, np.array([[9]], np.int32)), {"rows": rows, "dim": dim})
    assert got.tobytes() == DATA[9 : 9 + rows].tobytes()


def test_a_scalar_offset_store_skips_the_rows_outside():
    """A store at a run-time row start whose last rows fall outside the tensor: with
    oob_mode=skip those rows are skipped (the library's indexed_flatten relies on it), by
    default the store raises."""
    src = np.arange(4 * 8, dtype=np.float32).reshape(4, 8)
    got = _out("scalar_store", (src, np.array([[6]], np.int32)), {"rows": 8})
    want = np.full((8, 8), -1, np.float32)
    want[6:8] = src[0:2]
    assert got.tobytes() == want.tobytes()
    with pytest.raises(kgolden.KernelError, match="run-time offset 6"):
        _out("scalar_store", (src, np.array([[6]], np.int32)), {"rows": 8, "skip": False})


def test_the_index_is_read_when_the_instruction_runs():
    """The stream carries the index tensor as a source (its write comes first) and the
    offset's description; the golden reads the value the state holds then."""
    program = nki.trace(_k("gather"), (DATA, np.zeros((4, 1), np.int32)))
    (ins,) = [i for s in program.streams.values() for i in s if i.args.get("indirect")]
    (spec,) = ins.args["indirect"]
    assert spec == {"side": "src", "at": 0, "kind": "vector", "stride": 16, "index": 1}
    assert ins.srcs[1].space == "sbuf" and ins.waits  # after the index's load
    again = program.to_json()
    assert "indirect" in again


# -- dma_compute -----------------------------------------------------------------------------------


def _f32_sum(*xs):
    acc = xs[0].astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for x in xs[1:]:
            acc = (acc + x.astype(np.float32)).astype(np.float32)
    return acc


ADVERSARIAL = np.array(
    [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 3e38, 1.5, 2.5, -2.5, 1e-40, 65504.0, 7.0],
    np.float32,
)


@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16", "int32", "int8"])
def test_dma_compute_adds_in_float32_then_rounds_once(out_dtype):
    """Each source as float32, added in source order with one float32 rounding per addition,
    the sum rounded once to dst (floats to nearest even, integers half to even and saturated);
    NaN sums the canonical quiet NaN.  Adversarial values: signed zeros, infinities (inf +
    -inf is NaN), NaN, overflow past float32's largest, ties, subnormals."""
    n = ADVERSARIAL.size
    a = np.tile(ADVERSARIAL, (n, 1))
    b = np.tile(ADVERSARIAL[:, None], (1, n))
    c = np.full((n, n), 0.5, np.float32)
    got = _out("compute", (a, b, c), {"out_dtype": out_dtype})
    s = _f32_sum(a, b, c)
    if out_dtype == "float32":
        want = np.where(np.isnan(s), np.uint32(0x7FC00000).view(np.float32), s)
        assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()
    elif out_dtype == "bfloat16":
        want = s.astype(ml_dtypes.bfloat16)
        assert np.array_equal(got.astype(np.float32), want.astype(np.float32), equal_nan=True)
    else:
        info = np.iinfo(out_dtype)
        finite = np.where(np.isnan(s), 0, s).astype(np.float64)
        want = np.clip(np.rint(finite), info.min, info.max)
        ok = ~np.isnan(s)
        assert np.array_equal(got[ok].astype(np.float64), want[ok])


def test_dma_compute_of_mixed_dtypes():
    """Sources of different dtypes: each converted to float32 first (an int32 exactly below
    2^24), the bfloat16 result one rounding of the float32 sum."""
    a = RNG.standard_normal((16, 8)).astype(ml_dtypes.bfloat16)
    b = RNG.integers(-1000, 1000, (16, 8)).astype(np.int32)
    c = RNG.standard_normal((16, 8)).astype(np.float32)
    got = _out("compute", (a, b, c), {"out_dtype": "bfloat16"})
    assert got.tobytes() == _f32_sum(a, b, c).astype(ml_dtypes.bfloat16).tobytes()


def test_dma_compute_into_sbuf_and_its_read_modify_writes():
    """dst += src in the SBUF; the gather RMW (acc[p] + table[idx[p]]); the scatter RMW
    (table[idx[p]] += upd[p], unique indices)."""
    a = RNG.standard_normal((16, 8)).astype(np.float32)
    b = RNG.standard_normal((16, 8)).astype(np.float32)
    assert _out("compute_sbuf", (a, b)).tobytes() == (a + b).tobytes()
    idx = np.array([3, 60, 0, 12], np.int32).reshape(4, 1)
    acc = RNG.standard_normal((4, 16)).astype(np.float32)
    got = _out("gather_add", (DATA, idx, acc))
    assert got.tobytes() == (acc + DATA[idx[:, 0]]).tobytes()
    upd = RNG.standard_normal((4, 16)).astype(np.float32)
    want = DATA.copy()
    want[idx[:, 0]] += upd
    assert _out("scatter_add", (DATA, idx, upd)).tobytes() == want.tobytes()


def test_dma_compute_costs_a_pass_per_source():
    """The engines read each source: three sources move three times the bytes and packets of
    a copy (v3); on v4 the SBUF dst that is itself a source is the near-memory
    read-add-write's, one pass for two sources."""
    a = np.zeros((128, 512), np.float32)
    rep = _run("compute", (a, a, a), {"out_dtype": "float32"}, timing=True).report
    (rec,) = [r for rs in rep.records.values() for r in rs if r.ins.op == "dma_compute"]
    assert rec.ins.args["passes"] == 3
    c = ktiming.DMA_COSTS["v3"]
    # device memory to device memory: 128 rows over 16 engines, 2 KiB each, 3 passes
    want = 8 * 3 * (256 + 2048) / c.bytes_per_ns
    assert rep.core.ns(rec.end - rec.start) == pytest.approx(want, abs=rep.core.ns(1))
    for core, passes in (("v3", 2), ("v4", 1)):
        rep = _run("compute_sbuf", (a, a), core=core, timing=True).report
        (rec,) = [r for rs in rep.records.values() for r in rs if r.ins.op == "dma_compute"]
        assert rec.ins.args["passes"] == passes
        c = ktiming.DMA_COSTS[core]
        want = 8 * passes * (256 + 2048) / c.bytes_per_ns
        assert rep.core.ns(rec.end - rec.start) == pytest.approx(want, abs=rep.core.ns(1))


def test_a_gather_is_a_packet_per_row_on_the_software_dge():
    """A vector_offset gather of 128 rows of 64 bytes, each row its packet (a static copy of
    the same contiguous rows would be one run per partition, too: the same packets), after
    the software DGE's 600 ns on the GpSimd engine; a scalar offset on the hardware DGE."""
    table = np.zeros((256, 16), np.float32)
    idx = np.arange(128, dtype=np.int32).reshape(128, 1)
    rep = _run("gather", (table, idx), timing=True).report
    (rec,) = [r for rs in rep.records.values() for r in rs if r.ins.args.get("indirect")]
    assert rec.ins.args["dge"] == "sw"
    c = ktiming.DMA_COSTS["v3"]
    want = c.dge_ns + 8 * (256 + 64) / c.bytes_per_ns
    assert rep.core.ns(rec.end - rec.start) == pytest.approx(want, abs=rep.core.ns(1))
    program = nki.trace(_k("scalar_rows"), (table, np.zeros((1, 1), np.int32)), {"rows": 4})
    (ins,) = [i for s in program.streams.values() for i in s if i.args.get("indirect")]
    assert ins.args["dge"] == "hw"
    program = nki.trace(
        _k("scalar_rows"), (table, np.zeros((1, 1), np.int32)), {"rows": 4}, core="v2"
    )
    (ins,) = [i for s in program.streams.values() for i in s if i.args.get("indirect")]
    assert ins.args["dge"] == "sw"


def test_priority_serves_the_higher_level_first():
    """NeuronCore-v4 QoS: two loads issued together share the engines equally with no
    priority (each at half rate, both done together); with priorities 0 and 3 the first has
    every engine until it is done, then the second."""
    x = np.zeros((128, 1024), np.float32)
    one = ktiming.DMA_COSTS["v4"].transfer_ns(128, 4096)

    def data_ends(first, second):
        rep = _run("two_loads", (x,), {"first": first, "second": second}, "v4", True).report
        recs = sorted(
            (r for n, rs in rep.records.items() if n.startswith("dma") for r in rs),
            key=lambda r: r.ins.seq,
        )
        return [rep.core.ns(r.end - r.start) for r in recs[:2]]

    both = data_ends(None, None)
    assert both == pytest.approx([2 * one, 2 * one], rel=1e-3)
    first, second = data_ends(3, 0)
    assert second == pytest.approx(one, rel=1e-3) and first == pytest.approx(2 * one, rel=1e-3)


# -- dma_transpose -----------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(16, 8), (4, 6, 8), (2, 1, 3, 8)])
def test_dma_transpose_by_axes(shape):
    """2-D (1, 0), 3-D (2, 1, 0), 4-D (3, 1, 2, 0): dst = np.transpose(src, axes), bits
    moved."""
    x = RNG.standard_normal(shape).astype(ml_dtypes.bfloat16)
    axes = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}[len(shape)]
    got = _out("transpose", (x,))
    assert got.tobytes() == np.ascontiguousarray(np.transpose(x, axes)).tobytes()


def test_the_indirect_transpose_gathers_rows_in_column_major_order():
    """flat = idx.T.flatten(); dst = src[flat].T (the reference's formula): indices [128, 2]
    read down the partitions first, 256 rows gathered."""
    src = RNG.standard_normal((300, 128)).astype(ml_dtypes.bfloat16)
    idx = RNG.integers(0, 300, (128, 2)).astype(np.uint32)
    got = _out("gather_transpose", (src, idx))
    flat = idx.T.flatten()
    assert got.tobytes() == np.ascontiguousarray(src[flat].T).tobytes()


# -- views -------------------------------------------------------------------------------------------


X3 = np.arange(4 * 5 * 8, dtype=np.float32).reshape(4, 5, 8)
VIEWS = {
    "permute": lambda x: x.transpose(2, 0, 1),
    "broadcast": lambda x: np.broadcast_to(x[:, 0:1, :], (4, 3, 8)),
    "expand": lambda x: x[:, None],
    "squeeze": lambda x: x[:, 1],
    "reshape_dim": lambda x: x.reshape(4, 5, 2, 4),
    "flatten": lambda x: x.reshape(4, 40),
    "rearrange": lambda x: x.reshape(4, 5, 2, 4).transpose(0, 3, 2, 1),
    "slice": lambda x: x[:, :, 1:7:2],
    "select": lambda x: x[:, 2],
    "reshape": lambda x: x.transpose(1, 0, 2).reshape(5, 2, 2, 8),
}


@pytest.mark.parametrize("how", sorted(VIEWS))
def test_view_methods_address_the_storage_as_numpy_does(how):
    """Each view method of a device tensor, read by a DMA, gives numpy's view's elements."""
    got = _out("view_copy", (X3,), {"how": how})
    want = np.ascontiguousarray(VIEWS[how](X3))
    assert got.shape == want.shape and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("how", ["reshape_dim", "broadcast"])
def test_view_methods_of_an_sbuf_tile(how):
    x = RNG.standard_normal((16, 8)).astype(np.float32)
    want = {
        "reshape_dim": x.reshape(16, 2, 4).transpose(0, 2, 1),
        "broadcast": np.broadcast_to(x[:, 0:1], (16, 8)),
    }[how]
    got = _out("sbuf_view", (x,), {"how": how})
    assert got.tobytes() == np.ascontiguousarray(want).tobytes()


def test_view_queries():
    """is_contiguous (the partition dimension apart on chip), get_pattern, is_indirect."""
    seen = {}

    @nki.jit
    def probe(x, idx):
        import nki.language as nl

        t = nl.ndarray((16, 4, 8), dtype=x.dtype, buffer=nl.sbuf)
        i = nl.ndarray((4, 1), dtype=nl.int32, buffer=nl.sbuf)
        seen["sbuf"] = (
            t.is_contiguous(),
            t[0:4].is_contiguous(),
            t.permute((0, 2, 1)).is_contiguous(),
        )
        seen["hbm"] = x.is_contiguous(), x[0:2].is_contiguous(), x[:, 0:2].is_contiguous()
        seen["pattern"] = t.get_pattern(), x.permute((1, 0)).get_pattern()
        seen["indirect"] = x.is_indirect(), x.vector_select(0, i).is_indirect()
        return None

    nki.trace(probe, (np.zeros((8, 6), np.float32), np.zeros((4, 1), np.int32)))
    assert seen["sbuf"] == (True, True, False)
    assert seen["hbm"] == (True, True, False)
    assert seen["pattern"] == ([[32, 16], [8, 4], [1, 8]], [[1, 6], [6, 8]])
    assert seen["indirect"] == (False, True)


def test_an_indirect_view_gathers_columns_for_the_compute_engines():
    """NeuronCore-v4 .indirect: column i of the view is column idx[i % 16, i // 16] (the
    Vector Engine's group of 16), num_elem of them; an offset past the view raises."""
    x = RNG.standard_normal((32, 64)).astype(np.float32)
    idx = np.zeros((32, 2), np.int32)
    offs = np.array([5, 0, 63, 7, 7, 30, 1, 2, 9, 10, 11, 12, 13, 14, 15, 16, 40, 41, 42, 3])
    for i, o in enumerate(offs):
        idx[i % 16, i // 16] = o
    got = _out("column_gather", (x, idx), {"num": offs.size}, core="v4")
    assert got.tobytes() == np.ascontiguousarray(x[:, offs]).tobytes()
    idx[0, 0] = 64
    with pytest.raises(kgolden.KernelError, match="free offset 64"):
        _out("column_gather", (x, idx), {"num": offs.size}, core="v4")


def test_get_nc_sub_version():
    x = np.ones((4, 4), np.float32)
    assert _out("sub_version", (x,)).tobytes() == x.tobytes()


# -- rules -------------------------------------------------------------------------------------------

RULES = {
    "vector_on_sbuf": "a vector_offset indexes a device-memory",
    "float_index": "run-time indices are an integer dtype",
    "vector_dim": "indexes dimension 0 only",
    "dge_none": "precomputed descriptors cannot hold a run-time offset",
    "vector_hwdge": "software DGE",
    "skip_static": "no view here has one",
    "priority": "NeuronCore-v4 and later",
    "to_compute": "is read by the DMA",
    "reduce_op": "reduce_op",
    "scales": "every scale is 1.0",
    "sizes": "elements",
    "rmw_sources": "exactly 2 sources",
    "axes": "axes=(0, 1)",
    "dge_value": "dge_mode=7: one of nisa.dge_mode's unknown, swdge, hwdge, none (0-3)",
    "transpose_swdge": "a DMA transpose takes unknown, none or hwdge",
    "indirect_v3": "NeuronCore-v4 and later",
    "partition_broadcast": "partition dimension",
    "not_contiguous": "not contiguous",
    "vector_slice": "indirect dimension",
}


@pytest.mark.parametrize("case", sorted(RULES))
def test_rules(case):
    """Each broken rule is one NkiError naming the kernel's line, the call and the rule."""
    x = np.zeros((8, 16), np.float32)
    idx = np.zeros((8, 1), np.int32)
    with pytest.raises(nki.NkiError) as e:
        nki.trace(_k("bad"), (x, idx), {"case": case})
    msg = str(e.value)
    assert msg.startswith(kernel_line(KERNELS, case) + ": "), msg
    assert RULES[case] in msg, msg
    assert "\n" not in msg


def test_dge_mode_as_its_integer_value():
    """``dge_mode=`` given as its integer value (nki-library passes ``3``) is that member;
    ``none`` on a transpose is the compiler's transpose, as ``unknown`` is."""
    x = RNG.standard_normal((16, 32)).astype(np.float32)

    @nki.jit
    def transposed(a, mode):
        import nki.isa as nisa
        import nki.language as nl

        t = nl.ndarray((32, 16), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=t, src=a, dge_mode=mode)
        out = nl.ndarray((32, 16), dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t, dge_mode=mode)
        return out

    for mode in (0, 3, nki.isa.dge_mode.none):
        res = nki.run(transposed, (x,), {"mode": mode})
        assert np.array_equal(res.outputs[0], x.T)
