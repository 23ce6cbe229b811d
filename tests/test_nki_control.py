"""Registers and dynamic loops (docs/nki/control.md): the golden against numpy, the timing run
following the count read at run time, the streams' waits across iterations, and the rules
checked when the kernel is traced."""

import json
import os
import textwrap

import numpy as np
import pytest

import ncrtl.nki as nki
from ncrtl.kernels import load_file
from ncrtl.model.kernel import loops
from ncrtl.model.kernel import timing as ktiming
from ncrtl.model.kernel.golden import KernelError
from ncrtl.model.kernel.stream import CORES, Program
from tests.kernel_lines import kernel_line

HERE = os.path.dirname(__file__)
KERNELS = os.path.join(HERE, "kernels", "control.py")
P, F = 128, 64


def _k(name):
    return load_file(KERNELS, name)


def _x():
    return ((np.arange(P * F, dtype=np.float32).reshape(P, F) % 7) / 4).astype(np.float32)


def _i32(v):
    return np.array([[v]], np.int32)


# -- the golden --------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 3])
def test_loop_count_is_read_from_a_tensor_at_run_time(n):
    x = _x()
    out = nki.run(_k("count_loop"), (x, _i32(n)), timing=False).outputs[0]
    ref = np.zeros_like(x)
    for _ in range(n):
        ref = (ref + x).astype(np.float32)
    assert np.array_equal(out, ref)


@pytest.mark.parametrize(
    "lo, hi, step, form",
    [
        (2, 9, 3, "range"),  # 2 + 5 + 8
        (-4, 3, 1, "range"),  # negative start
        (5, 5, 1, "range"),  # empty
        (7, 2, 2, "fori"),  # empty: start past stop
        (3, 9, 1, "fori"),
    ],
)
def test_induction_register_takes_each_value_of_the_range(lo, hi, step, form):
    out = nki.run(
        _k("induction_sum"), (_x(), _i32(lo), _i32(hi)), {"step": step, "form": form}, timing=False
    ).outputs[0]
    assert int(out[0, 0]) == sum(range(lo, hi, step))


def test_induction_start_may_be_an_immediate():
    out = nki.run(_k("induction_sum"), (_x(), 3, _i32(9)), {"form": "fori"}, timing=False)
    assert int(out.outputs[0][0, 0]) == sum(range(3, 9))


@pytest.mark.parametrize("form", ["while_loop", "statement"])
@pytest.mark.parametrize("n", [0, 1, 4])
def test_while_loops_run_until_their_register_is_zero(form, n):
    x = _x()
    out = nki.run(_k("countdown"), (x, _i32(n)), {"form": form}, timing=False).outputs[0]
    ref = np.zeros_like(x)
    for _ in range(n):
        ref = (ref + x).astype(np.float32)
    assert np.array_equal(out, ref)


def test_nested_dynamic_loops():
    x = _x()
    res = nki.run(_k("nested"), (x, _i32(2), _i32(3)))
    assert np.array_equal(res.outputs[0], 6 * x)
    trips = res.program.trips
    assert sorted(trips.values()) == [2, 3, 3]  # the outer loop once, the inner per iteration


def test_registers_move_load_and_store_32_bit_values():
    for n in (11, -3, 2**31 - 1):
        out = nki.run(_k("register_roundtrip"), (_x(), _i32(n)), timing=False).outputs[0]
        assert out.tolist() == [[n, 7, -5]]


def _staged_ref(x, n):
    acc = np.zeros_like(x)
    for _ in range(n):
        t = x.copy()
        u = (t * np.float32(2)).astype(np.float32)
        acc = (acc + u).astype(np.float32)
        t = (t + np.float32(1)).astype(np.float32)
        acc[:, -1] = (acc[:, -1] - t[:, 0]).astype(np.float32)
        acc[:, -1] = (acc[:, -1] + u[:, 0]).astype(np.float32)
    return acc


@pytest.mark.parametrize("order", ["program", "reverse", "random"])
def test_a_body_waits_on_the_previous_iteration_in_any_order(order):
    """The next iteration's DMA into the tile waits for this iteration's readers of it (a
    write after read across iterations): every order the semaphores allow gives the same
    values."""
    x = _x()
    res = nki.run(_k("staged"), (x, _i32(3)), timing=False, order=order)
    assert np.array_equal(res.outputs[0], _staged_ref(x, 3))
    dma = [i for s in res.program.streams.values() for i in s if i.op == "dma_copy"]
    load = [i for i in dma if i.line == kernel_line(KERNELS, "staged_load")][0]
    readers = {s for s, _ in load.carried}
    assert {"scalar", "vector"} <= readers  # the previous iteration's readers of the tile


def test_a_tensor_used_before_and_in_a_loop_keeps_its_space_through_it():
    prog = nki.trace(_k("staged"), (_x(), _i32(2)))
    t = {n: i for n, i in prog.tensors.items() if i.space == "sbuf"}
    # the accumulator (before, in and after the loop) and the loop's tiles never share bytes
    spans = sorted((i.base, i.base + i.partition_bytes) for i in t.values())
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_streams_with_loops_round_trip_through_json():
    x = _x()
    prog = nki.trace(_k("staged"), (x, _i32(2)))
    again = Program.from_json(prog.to_json())
    assert [i.carried for s in again.streams.values() for i in s] == [
        i.carried for s in prog.streams.values() for i in s
    ]
    from ncrtl.model.kernel import golden

    out, _ = golden.run(again, [x, _i32(2)])
    assert np.array_equal(out[0], _staged_ref(x, 2))


def test_every_stream_of_the_body_runs_the_loop_and_loads_its_register():
    prog = nki.trace(_k("count_loop"), (_x(), _i32(2)))
    with_loop = {n for n, s in prog.streams.items() if any(i.op == "loop_begin" for i in s)}
    loads = {n for n, s in prog.streams.items() if any(i.op == "register_load" for i in s)}
    assert with_loop == loads == {"vector"}


# -- the timing run ----------------------------------------------------------------------------


def test_timing_scales_with_the_count_read_at_run_time():
    """Each more iteration costs its body (a tensor_tensor of F elements per partition and
    two inputs: 2F cycles) and the loop's test and branch (loops.SEQUENCER_CYCLES) on the
    Vector Engine's clock."""
    x = _x()
    ns = [
        nki.run(_k("count_loop"), (x, _i32(n)), golden=False).report.total_ns for n in range(2, 6)
    ]
    step = (2 * F + loops.SEQUENCER_CYCLES) / CORES["v3"].vector_mhz * 1000
    assert np.allclose(np.diff(ns), step)


def test_timing_only_computes_the_registers_from_their_instructions():
    """Without the golden's values the loops' counts come from the golden run of the
    instructions the registers depend on (x's first element + 1, on the Vector Engine), not
    the others (the exp); the timing equals the run after the golden."""
    x = _x()
    for v in (0.0, 2.4):
        n = np.array([[v]], np.float32)
        with_golden = nki.run(_k("counted_copy"), (x, n))
        alone = nki.run(_k("counted_copy"), (x, n), golden=False)
        assert alone.report.total_ns == with_golden.report.total_ns
        assert alone.program.trips == with_golden.program.trips
        assert np.array_equal(with_golden.outputs[0], x * round(v + 1))
    prog = nki.trace(_k("counted_copy"), (x, n))
    ops = {i.op for s in prog.streams.values() for i in s if id(i) in loops._slice([prog])}
    assert "activation" not in ops and "tensor_scalar" in ops


def test_timing_only_from_the_command_line(tmp_path):
    from ncrtl.cli import main

    x = _x()
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "n.npy", _i32(3))
    totals = []
    for extra in ([], ["--timing-only"]):
        out = tmp_path / f"out{len(extra)}"
        main(
            ["run", f"{KERNELS}::count_loop", "--args", str(tmp_path / "x.npy"),
             str(tmp_path / "n.npy"), "--out", str(out), *extra]
        )  # fmt: skip
        totals.append(json.loads((out / "report.json").read_text())["total_ns"])
    assert totals[0] == totals[1]


def test_the_report_counts_the_transfers_of_each_iteration():
    """A loop's instructions on the DMA queues move nothing: the report's DMA figures are the
    transfers, each iteration's counted (the summary of a kernel with transfers in a device
    loop)."""
    x = _x()
    for n in (2, 5):
        res = nki.run(_k("copy_loop"), (x, _i32(n)))
        assert np.array_equal(res.outputs[0], x)
        s = res.report.summary()
        moved = 4 + n * 2 * x.nbytes  # the count's load, then each iteration's two copies
        assert s["dma_bytes"] == moved
        assert s["dma_queues"]["dma_engines"]["bytes"] == moved
        assert sum(v["bytes"] for v in s["dma_engines"].values()) == moved


def test_timing_refuses_a_loop_without_trip_counts():
    prog = nki.trace(_k("count_loop"), (_x(), _i32(2)))
    with pytest.raises(KernelError, match=r"control\.py:\d+: nl\.dynamic_range .*trip count"):
        ktiming.simulate(prog)


def test_a_loop_on_immediates_needs_no_register_values():
    x = _x()
    res = nki.run(_k("static_bounds"), (x,), golden=False)
    assert list(res.program.trips.values()) == [3]
    assert np.array_equal(nki.run(_k("static_bounds"), (x,), timing=False).outputs[0], 3 * x)


def test_loop_instructions_are_in_the_trace():
    res = nki.run(_k("count_loop"), (_x(), _i32(2)), golden=True, trace_file=True)
    names = {e.get("name", "").split(" ")[0] for e in res.report.trace.events()}
    assert {"loop_begin", "loop_end", "register_load"} <= names
    vec = res.report.records["vector"]
    assert [r.ins.op for r in vec].count("tensor_tensor") == 2
    summary = res.report.summary()
    assert summary["instructions"]["vector"] == 4  # load, begin, the body, end
    assert summary["instructions_run"]["vector"] == 6  # load, begin, (body, end) twice


# -- the rules ---------------------------------------------------------------------------------


def _kernel(tmp_path, body, name="k"):
    src = textwrap.dedent(
        """
        import nki
        import nki.isa as nisa
        import nki.language as nl

        @nki.jit
        def k(x, n):
            s = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.dma_copy(dst=s, src=n)
            r = nisa.register_alloc()
            nisa.register_load(r, s)
            t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
        """
    ) + textwrap.indent(textwrap.dedent(body), "    ")
    src += "    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)\n"
    src += "    nisa.dma_copy(dst=out, src=t)\n    return out\n"
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    return load_file(str(path), "k"), path


def _fails(tmp_path, body, match, n=2, cls=nki.NkiError):
    k, path = _kernel(tmp_path, body)
    with pytest.raises(cls, match=match) as e:
        nki.run(k, (_x(), _i32(n)))
    assert str(e.value).startswith(f"{path}:"), str(e.value)
    assert "\n" not in str(e.value)
    return str(e.value)


@pytest.mark.parametrize(
    "body, match",
    [
        (
            "u = nl.ndarray((r, 4), dtype=nl.float32)\n",
            r"nl\.ndarray: shape must hold integers known when the kernel is traced, not \(Virtual",
        ),
        (
            "v = t[:, r]\n",
            r"\[\.\.\.\]: index of dimension 1 must be an integer known when the kernel is traced",
        ),
        ("v = r + 1\n", "register r0: .*Python number"),
        (
            "v = t[:, nl.ds(r, 4)]\n",
            "nl.ds: start must be an integer known when the kernel is traced",
        ),
    ],
)
def test_a_register_is_no_value_at_trace_time(tmp_path, body, match):
    _fails(tmp_path, body, match)


@pytest.mark.parametrize(
    "body, match",
    [
        (
            "b = nl.ndarray((2, 1), dtype=nl.int32)\nnisa.register_load(r, b)\n",
            r"nisa\.register_load: src .* must hold one element",
        ),
        (
            "b = nl.ndarray((1, 1), dtype=nl.float32)\nnisa.register_load(r, b)\n",
            r"nisa\.register_load: src .* is float32: a register holds an integer",
        ),
        (
            "b = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.psum)\nnisa.register_load(r, b)\n",
            r"nisa\.register_load: src .* is in psum",
        ),
        (
            "b = nl.ndarray((1, 1), dtype=nl.int16)\nnisa.register_store(b, r)\n",
            r"nisa\.register_store: dst .* is int16: a register is stored as int32 or uint32",
        ),
        ("nisa.register_load(t, s)\n", r"nisa\.register_load: dst must be a register"),
        ("q = nisa.register_alloc(1 << 33)\n", r"nisa\.register_alloc: x=8589934592 does not fit"),
        ("nisa.register_move(r, 1.5)\n", r"nisa\.register_move: src must be an integer or a reg"),
        ("nisa.register_move(r)\n", r"nisa\.register_move: missing argument 'src'"),
    ],
)
def test_register_instruction_rules(tmp_path, body, match):
    _fails(tmp_path, body, match)


@pytest.mark.parametrize(
    "body, match",
    [
        (
            "for i in nl.dynamic_range(0, r, 0):\n    pass\n",
            r"nl\.dynamic_range: step must be a positive",
        ),
        (
            "for i in nl.dynamic_range(0, r, r):\n    pass\n",
            r"nl\.dynamic_range: step must .* not a register",
        ),
        (
            "for i in nl.dynamic_range(0.5, r):\n    pass\n",
            r"nl\.dynamic_range: start must be an integer or a register",
        ),
        ("nl.fori_loop(0, r, 3)\n", r"nl\.fori_loop: body_fun must be a function"),
        ("nl.while_loop(r, lambda q: 1)\n", r"nl\.while_loop: body_fun returns 1"),
        (
            "if r:\n    nisa.memset(dst=t, value=0.0)\n",
            r"while r0: the truth of register r0 opened a dynamic while loop that never closed",
        ),
        (
            "for i in nl.dynamic_range(r):\n    nisa.memset(dst=t, value=0.0)\n    break\n",
            r"nl\.dynamic_range: the dynamic loop never ended: .*no `break`",
        ),
    ],
)
def test_dynamic_loop_rules(tmp_path, body, match):
    _fails(tmp_path, body, match)


def test_a_register_belongs_to_the_trace_that_allocated_it(tmp_path):
    """A register kept from another trace of the kernel (another run, or the other core's of a
    kernel[2]): an engine's registers are its own core's."""
    import builtins

    body = "import builtins\nq = getattr(builtins, '_ncrtl_reg', r)\nbuiltins._ncrtl_reg = r\n"
    k, _ = _kernel(tmp_path, body + "nisa.register_move(r, q)\n")
    try:
        nki.run(k, (_x(), _i32(1)))
        with pytest.raises(nki.NkiError, match=r"register_move: src r0 was allocated by another"):
            nki.run(k, (_x(), _i32(1)))
    finally:
        del builtins._ncrtl_reg


def test_an_unwritten_register_is_an_error_when_the_streams_run(tmp_path):
    k, path = _kernel(
        tmp_path,
        "q = nisa.register_alloc()\nfor i in nl.dynamic_range(q):\n    nisa.memset(dst=t, value=0.0)\n",
    )
    with pytest.raises(
        KernelError, match=r"k\.py:\d+: nl\.dynamic_range .*reads register r1 .*which nothing wrote"
    ):
        nki.run(k, (_x(), _i32(1)))


def test_an_engine_holds_at_most_64_registers(tmp_path):
    body = "regs = [nisa.register_alloc(i) for i in range(65)]\n"
    body += "o = nl.ndarray((1, 65), dtype=nl.int32)\n"
    body += "for i, q in enumerate(regs):\n    nisa.register_store(o[0:1, i:i + 1], q)\n"
    _fails(tmp_path, body, r"register r\d+: the gpsimd sequencer would hold 65 registers")


def test_a_loop_that_never_ends_is_stopped(tmp_path, monkeypatch):
    monkeypatch.setattr(loops, "MAX_ITERATIONS", 20)
    k, _ = _kernel(
        tmp_path, "q = nisa.register_alloc(1)\nwhile q:\n    nisa.memset(dst=t, value=0.0)\n"
    )
    with pytest.raises(
        KernelError, match=r"k\.py:\d+: while r1 \(.*\) this loop ran 20 iterations"
    ):
        nki.run(k, (_x(), _i32(1)))


@pytest.mark.parametrize("lo, hi", [(1, 5), (0, 0)])
def test_the_induction_register_as_a_run_time_offset(lo, hi):
    x = _x()
    res = nki.run(_k("columns"), (x, _i32(lo), _i32(hi)))
    ref = np.zeros_like(x)
    ref[:, lo:hi] = 2 * x[:, lo:hi]
    assert np.array_equal(res.outputs[0], ref)
    alone = nki.run(_k("columns"), (x, _i32(lo), _i32(hi)), golden=False)
    assert alone.report.total_ns == res.report.total_ns
