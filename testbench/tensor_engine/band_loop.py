"""The Tensor Engine simulated as column bands stepped in parallel: a design that scales with
cores.

One Verilated model of a big engine evaluates every PE on one thread (or on Verilator's own
threads, which hardly scale for this design: its hierarchical tile blocks are scheduled as a
few large tasks).  Here the engine is two designs (:mod:`ncrtl.hdl.tensor_engine.band`): the
engine without its PE grid (``TensorEngine(external_grid=True)``: control, skew lines, output
de-skew, the stream ports) and one column band of the grid (:class:`PEBand`), compiled once and
placed ``bands`` times.  Every cycle the C++ loop (:func:`ncrtl.testbench.stream_loop.loop_cpp`
with the hooks below):

1. settles the engine with the clock low: its ``o_grid_*`` outputs are the grid's inputs for
   the coming edge;
2. gives every band its inputs: band 0 the engine's row words and tags, band ``b`` its left
   neighbour's last-column registers, each LoadStationary entry the engine's chain (or the
   neighbour's chain where a chain crosses the band edge) -- all of them values fixed before
   the edge, since only registers meet at a band edge;
3. clocks the engine and every band, the bands on ``threads`` threads (band ``b`` on thread
   ``b % threads``), and waits for all of them;
4. gives the engine the psums leaving the bands' bottom rows (registers too).

The loop is exact: on the files of a testbench run it writes the same transfer logs, output
beats and error strobes in the same cycles as the testbench and as the one-model loop
(tests/test_tensor_engine_conformance.py).  ``ncrtl bench --only bands`` measures it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

from ncrtl.hdl.tensor_engine.array import PE_WIDTHS
from ncrtl.hdl.tensor_engine.band import BAND_MODULE, PEBand, band_plan
from ncrtl.hdl.tensor_engine.top import TensorEngine
from ncrtl.hdl.verilog import convert

__all__ = ["band_designs", "band_hooks", "build_band_loop", "BandBuild"]


def band_designs(rows, cols, bands, *, tile_unit=32, modes=None, block=None):
    """``(engine, band, plan)``: the engine without its grid, one band of ``cols / bands``
    columns, and :func:`~ncrtl.hdl.tensor_engine.band.band_plan` of the cut."""
    engine = TensorEngine(rows, cols, tile_unit=tile_unit, modes=modes, external_grid=True)
    chain = engine.array.chain_width
    plan = band_plan(cols, bands, chain)
    band = PEBand(rows, cols // bands, chain_width=chain, block=block, modes=modes)
    return engine, band, plan


_HEAD = r"""
#include "Vband.h"
#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <thread>

// Copy n bits from src (bit soff) to dst (bit doff), 32-bit words, LSB first.
static void copy_bits(uint32_t* dst, size_t doff, const uint32_t* src, size_t soff, size_t n) {
  if (doff % 32 == 0 && soff % 32 == 0 && n % 32 == 0) {
    std::memcpy(dst + doff / 32, src + soff / 32, n / 8);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bit = (src[(soff + i) / 32] >> ((soff + i) % 32)) & 1u;
    uint32_t& d = dst[(doff + i) / 32];
    d = (d & ~(1u << ((doff + i) % 32))) | (bit << ((doff + i) % 32));
  }
}
// A port's value as 32-bit words and back (scalars up to 64 bits, VlWide above).
template <typename T> static void get_words(const T& v, uint32_t* w) {
  w[0] = (uint32_t)v;
  if (sizeof(T) > 4) w[1] = (uint32_t)((uint64_t)v >> 32);
}
template <std::size_t N> static void get_words(const VlWide<N>& v, uint32_t* w) {
  for (std::size_t i = 0; i < N; ++i) w[i] = v[i];
}
template <typename T> static void put_words(T& v, const uint32_t* w) {
  v = (T)(sizeof(T) > 4 ? ((uint64_t)w[0] | ((uint64_t)w[1] << 32)) : w[0]);
}
template <std::size_t N> static void put_words(VlWide<N>& v, const uint32_t* w) {
  for (std::size_t i = 0; i < N; ++i) v[i] = w[i];
}

// Workers that run work(t) for t = 1 .. n-1 while the caller runs work(0), once per run().
struct Pool {
  int n = 1;
  std::vector<std::thread> threads;
  std::atomic<uint64_t> gen{0};
  std::atomic<int> left{0};
  std::atomic<bool> stop{false};
  std::function<void(int)> work;
  static void pause(int& spins) {
    if (++spins > 2000) std::this_thread::yield();  // oversubscribed: let the others run
  }
  void start(int count, std::function<void(int)> w) {
    n = count; work = std::move(w);
    for (int t = 1; t < n; ++t)
      threads.emplace_back([this, t] {
        uint64_t seen = 0;
        for (;;) {
          int spins = 0;
          while (gen.load(std::memory_order_acquire) == seen) {
            if (stop.load(std::memory_order_relaxed)) return;
            pause(spins);
          }
          seen = gen.load(std::memory_order_acquire);
          work(t);
          left.fetch_sub(1, std::memory_order_acq_rel);
        }
      });
  }
  void run() {
    left.store(n - 1, std::memory_order_relaxed);
    gen.fetch_add(1, std::memory_order_acq_rel);
    work(0);
    int spins = 0;
    while (left.load(std::memory_order_acquire)) pause(spins);
  }
  ~Pool() { stop = true; for (auto& t : threads) t.join(); }
};
"""


def _words(bits):
    return (bits + 31) // 32


def band_hooks(rows, cols, plan):
    """The :func:`~ncrtl.testbench.stream_loop.loop_cpp` hooks stepping the bands of ``plan``
    beside the engine (see the module docstring); the loop's second argument is the number of
    threads (default 1)."""
    W, T, S, L, P = PE_WIDTHS
    nb, width = len(plan), plan[0][1]
    entries = max(len(e) for _, _, e in plan) or 1
    chains_bits = max(k for _, _, e in plan for k in e) + 1
    bufs = {
        "g_x": rows * W,
        "g_tag": rows * T,
        "g_ls": chains_bits * rows * S,
        "g_lsc": chains_bits * rows * L,
        "g_psum": cols * P,
        "b_psum": width * P,
        "b_ls": entries * rows * S,
        "b_lsc": entries * rows * L,
    }
    head = _HEAD + "".join(
        f"static std::vector<uint32_t> {n}({_words(b) + 1}, 0);\n" for n, b in bufs.items()
    )
    head += "".join(
        f"static std::vector<uint32_t> o_{n}({_words(b) + 1}, 0);\n"
        for n, b in (("x", rows * W), ("tag", rows * T), ("ls", rows * S), ("lsc", rows * L))
    )
    setup = f"""
  const int n_threads = argc > 2 ? std::max(1, std::atoi(argv[2])) : 1;
  std::vector<std::unique_ptr<VerilatedContext>> band_ctx;
  std::vector<std::unique_ptr<Vband>> band;
  for (int b = 0; b < {nb}; ++b) {{
    band_ctx.emplace_back(new VerilatedContext);
    band.emplace_back(new Vband{{band_ctx.back().get()}});
    band[b]->clk = 0; band[b]->rst = 0; band[b]->eval();
  }}
  Pool pool;
  pool.start(std::min(n_threads, {nb}), [&](int t) {{
    if (t == 0) {{ top.clk = 1; top.eval(); }}
    for (int b = t; b < {nb}; b += pool.n) {{
      band[b]->clk = 1; band[b]->eval(); band[b]->clk = 0; band[b]->eval();
    }}
  }});
"""
    settle = [
        "    get_words(top.o_grid_x, g_x.data()); get_words(top.o_grid_tag, g_tag.data());",
        "    get_words(top.o_grid_ls, g_ls.data()); get_words(top.o_grid_ls_ctl, g_lsc.data());",
    ]
    for b, (_c0, _w, chains) in enumerate(plan):
        s = [f"    band[{b}]->en = top.o_grid_en;"]
        if b == 0:
            s.append(
                "    put_words(band[0]->i_x, g_x.data()); put_words(band[0]->i_tag, g_tag.data());"
            )
        else:
            s.append(
                f"    get_words(band[{b - 1}]->o_x, o_x.data()); put_words(band[{b}]->i_x, o_x.data());"
                f" get_words(band[{b - 1}]->o_tag, o_tag.data()); put_words(band[{b}]->i_tag, o_tag.data());"
            )
        if chains:
            for e, k in enumerate(chains):
                s.append(
                    f"    copy_bits(b_ls.data(), {e * rows * S}, g_ls.data(), {k * rows * S}, {rows * S});"
                    f" copy_bits(b_lsc.data(), {e * rows * L}, g_lsc.data(), {k * rows * L}, {rows * L});"
                )
            s.append(
                f"    put_words(band[{b}]->i_ls, b_ls.data()); put_words(band[{b}]->i_ls_ctl, b_lsc.data());"
            )
        else:  # the chain continues across the band edge
            s.append(
                f"    get_words(band[{b - 1}]->o_ls, o_ls.data()); put_words(band[{b}]->i_ls, o_ls.data());"
                f" get_words(band[{b - 1}]->o_ls_ctl, o_lsc.data()); put_words(band[{b}]->i_ls_ctl, o_lsc.data());"
            )
        settle += s
    rise = ["pool.run();"]
    for b, (c0, w, _) in enumerate(plan):
        rise.append(
            f"get_words(band[{b}]->o_psum, b_psum.data()); "
            f"copy_bits(g_psum.data(), {c0 * P}, b_psum.data(), 0, {w * P});"
        )
    rise.append("put_words(top.i_grid_psum, g_psum.data());")
    return {"head": head, "setup": setup, "settle": "\n".join(settle), "rise": " ".join(rise)}


class BandBuild:
    """A built band loop: ``binary`` and the seconds of the build's parts (``verilog``: the
    Verilog generation, ``band``: the band library's compile, ``loop``: the engine and the
    loop; 0 where cached)."""

    def __init__(self, binary, parts):
        self.binary, self.parts = binary, dict(parts)

    def run(self, folder, threads=1):
        """Run on the player files in ``folder`` with ``threads`` threads: ``(cycles,
        seconds)``, as :func:`ncrtl.testbench.stream_loop.run_loop`."""
        from ncrtl.testbench.stream_loop import run_loop

        return run_loop(self.binary, folder, threads)


def _build_band_library(text, directory, env, executable):
    """Verilate the band (``--prefix Vband``, its tiles as hierarchical blocks) into a static
    library under ``directory``; return the archives to link, the band's first."""
    from ncrtl.hdl.tensor_engine import VERILATOR_CONFIG
    from ncrtl.testbench.sim import BuildError

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "band.v").write_text(text)
    cmd = [
        str(executable),
        "--cc",
        "--build",
        "-j",
        "0",
        "-Wno-fatal",
        "--prefix",
        "Vband",
        "--top-module",
        BAND_MODULE,
        "--hierarchical",
        str(VERILATOR_CONFIG),
        "-Mdir",
        str(directory / "obj"),
        str(directory / "band.v"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=directory)
    if proc.returncode:
        raise BuildError(f"band library build failed:\n{(proc.stdout + proc.stderr)[-4000:]}")
    obj = directory / "obj"
    libs = [obj / "Vband__ALL.a"] + sorted(p for p in obj.rglob("*.a") if p.name != "Vband__ALL.a")
    missing = [str(p) for p in libs if not p.is_file()]
    if missing:
        raise BuildError(f"band library build made no {', '.join(missing)}")
    return libs


def build_band_loop(rows, cols, bands, *, tile_unit=32, modes=None, directory=None):
    """Build the band loop of a ``rows x cols`` engine (its PE built for ``modes``) cut into
    ``bands`` column bands: a :class:`BandBuild` (cached under the build root by the hash of
    the Verilog, the loop and the tools: a second call finds it)."""
    from ncrtl.testbench.sim import _locked, build_root, compile_env, find_verilator
    from ncrtl.testbench.stream_loop import build_loop
    from ncrtl.testbench.tensor_engine.test_tensor_engine import player_ports

    t0 = time.perf_counter()
    engine, band, plan = band_designs(rows, cols, bands, tile_unit=tile_unit, modes=modes)
    top = f"tensor_engine_{rows}x{cols}_grid"
    engine_text = convert(engine, top)
    band_text = convert(band, BAND_MODULE)
    verilog = time.perf_counter() - t0
    install = find_verilator()
    if directory is None:
        key = hashlib.sha256()
        for part in (band_text, install.version, install.env.get("MAKEFLAGS", "")):
            key.update(part.encode() + b"\0")
        directory = build_root() / f"te_band_{rows}x{cols // bands}-{key.hexdigest()[:16]}"
    directory = Path(directory)
    env = {**os.environ, **compile_env(install)}
    with _locked(directory.with_name(directory.name + ".lock")):
        done = directory / "built"
        if done.is_file():
            libs = [Path(p) for p in done.read_text().split()]
        else:
            libs = _build_band_library(band_text, directory, env, install.executable)
            done.write_text("\n".join(map(str, libs)))
    t1 = time.perf_counter()
    args = ["-CFLAGS", f"-I{directory / 'obj'}", "-LDFLAGS", " ".join(map(str, libs))]
    binary, loop_s = build_loop(
        engine_text,
        top,
        player_ports(rows, cols, tile_unit),
        extra_args=args,
        hooks=band_hooks(rows, cols, plan),
    )
    return BandBuild(binary, {"verilog": verilog, "band": t1 - t0 - verilog, "loop": loop_s})
