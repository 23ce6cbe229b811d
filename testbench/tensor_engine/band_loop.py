"""The Tensor Engine simulated as column bands stepped in parallel: a design that scales with
cores.

One Verilated model of a big engine evaluates every PE on one thread (or on Verilator's own
threads, which hardly scale for this design: its hierarchical tile blocks are scheduled as a
few large tasks).  Here the engine is two designs (:mod:`ncrtl.hdl.tensor_engine.band`): the
engine without its PE grid (``TensorEngine(external_grid=True)``: control, skew lines, output
de-skew, the stream ports) and the grid, cut into column bands (:class:`PEBand`).  The loop
steps the grid's tiles itself: the band's tile module (``te_tile``, ``block x block`` PEs) is
Verilated once as a flat model (``Vtile``) and placed ``rows / block x cols / block`` times,
each band's tiles on one thread.  (A Verilated band with its tiles as hierarchical blocks calls
every tile through a DPI wrapper several times a cycle, converting every port each time: that
cost 1.6x the tiles' own work.)  Every cycle the C++ loop
(:func:`ncrtl.testbench.stream_loop.loop_cpp` with the hooks below):

1. settles the engine with the clock low: its ``o_grid_*`` outputs are the grid's inputs for
   the coming edge, copied per tile row;
2. clocks the engine and every band, the bands on ``threads`` threads (band ``b`` on thread
   ``b % threads``), and waits for all of them.  A band steps its tiles from the bottom right
   to the top left, each after copying its inputs: the left tile's and the upper tile's
   registers (not yet clocked, so the values before the edge), at the band's left edge the
   engine's row words or the left band's last-column registers (kept in an edge buffer by the
   left band in the previous cycle, two buffers alternating by cycle parity), at a
   LoadStationary entry the engine's chain -- all of them values fixed before the edge, since
   only registers meet between tiles;
3. gives the engine the psums leaving the bottom tiles (registers too).

A tile takes its edge in one evaluation: its clock stays high after the edge, and before the
next edge the loop sets the trigger's memory of the clock low (the one member
:func:`tile_clock_member` finds), which is all an evaluation with the clock low would change
(it would recompute the logic from the unchanged inputs, to the same values).

The loop is exact: on the files of a testbench run it writes the same transfer logs, output
beats and error strobes in the same cycles as the testbench and as the one-model loop
(tests/test_tensor_engine_conformance.py).  ``ncrtl bench --only bands`` measures it.
``NCRTL_BAND_PHASES=1`` in the environment makes the loop print its time per cycle by phase.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import time
from pathlib import Path

from ncrtl.hdl.tensor_engine.array import PE_MODULE, PE_WIDTHS, TILE_MODULE, default_block
from ncrtl.hdl.tensor_engine.band import PEBand, band_plan, tile_verilog
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
#include "Vtile.h"
#include "Vtile___024root.h"
#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <type_traits>
#include <utility>

// n bits of src from bit soff, into dst from bit 0 (32-bit words, LSB first; src is read one
// word past the field, so its buffers carry a spare word).
static void extract_bits(uint32_t* dst, const uint32_t* src, size_t soff, size_t n) {
  const size_t w = soff / 32, s = soff % 32, words = (n + 31) / 32;
  for (size_t i = 0; i < words; ++i)
    dst[i] = (uint32_t)((src[w + i] | ((uint64_t)src[w + i + 1] << 32)) >> s);
  if (n % 32) dst[words - 1] &= (1u << (n % 32)) - 1u;
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

// The tile's ports as the loop holds them.
template <typename T> using Bare = std::remove_reference_t<T>;
using TileX = Bare<decltype(std::declval<Vtile&>().o_x)>;
using TileTag = Bare<decltype(std::declval<Vtile&>().o_tag)>;
using TileLs = Bare<decltype(std::declval<Vtile&>().o_ls)>;
using TileLsc = Bare<decltype(std::declval<Vtile&>().o_ls_ctl)>;
// What crosses a band edge (or enters the grid) in one tile row.
struct Edge { TileX x{}; TileTag tag{}; TileLs ls{}; TileLsc lsc{}; };
// One tile's step: where its inputs come from, where its outputs go.
struct TileStep {
  Vtile* t;
  Vtile* left;    // the tile to the left in the band, or null: the band's left edge
  Vtile* up;      // the tile above, or null: the top row (psum 0)
  int row;        // tile row
  int edge_in;    // at the band's left edge: the edge buffer (band index), -1 the engine
  int entry;      // a LoadStationary chain entering here: the chain, else -1
  int edge_out;   // in the band's last column: the next band's edge buffer, else -1
  int psum_word;  // in the bottom row: the psum's first word in g_psum, else -1
};
"""

_RISE_SKIP = """
// The rising edge of a tile whose clock is high since its last edge: the trigger's memory of
// the clock set low, as an evaluation with the clock low would leave it (that evaluation only
// recomputes the logic from the unchanged inputs, to the same values).
#define TILE_RISE(t) do {{ (t)->clk = 1; (t)->rootp->{prev} = 0; (t)->eval(); }} while (0)
"""

_RISE_TWO = """
#define TILE_RISE(t) do { (t)->clk = 0; (t)->eval(); (t)->clk = 1; (t)->eval(); } while (0)
"""


def _words(bits):
    return (bits + 31) // 32


def band_hooks(rows, cols, plan, *, block=None, tile_prev=None):
    """The :func:`~ncrtl.testbench.stream_loop.loop_cpp` hooks stepping the bands of ``plan``
    beside the engine (see the module docstring), each band as its ``block x block`` tiles
    (None: :data:`TILE_BLOCK` where it divides the band, else 1); the loop's
    second argument is the number of threads (default 1).  ``tile_prev``: the tile model's
    member holding the clock's last value (:func:`tile_clock_member`), so that a tile takes
    its edge in one evaluation; None: two evaluations, the clock low then high."""
    W, T, S, L, P = PE_WIDTHS
    nb, width = len(plan), plan[0][1]
    chains = max(k for _, _, e in plan for k in e) + 1
    chain = cols // chains
    if block is None:
        block = min(TILE_BLOCK, default_block(rows, width, min(width, chain)))
    B = block
    tr_n, tc_n, bt = rows // B, cols // B, width // B
    head = _HEAD + (_RISE_SKIP.format(prev=tile_prev) if tile_prev else _RISE_TWO)
    head += f"""
static const int NB = {nb}, TR = {tr_n}, TC = {tc_n}, BT = {bt}, BLOCK = {B}, CHAIN = {chain};
static std::vector<uint32_t> g_x({_words(rows * W) + 1}), g_tag({_words(rows * T) + 1});
static std::vector<uint32_t> g_ls({_words(chains * rows * S) + 1}), g_lsc({_words(chains * rows * L) + 1});
static std::vector<uint32_t> g_psum({_words(cols * P) + 1}), g_tmp({_words(B * max(W, T, S, L)) + 1});
static std::vector<Edge> g_rows(TR);  // the engine's row words and tags, per tile row
static std::vector<TileLs> g_ls_rows({chains} * TR);  // chain k's entry, tile row r: k * TR + r
static std::vector<TileLsc> g_lsc_rows({chains} * TR);
static std::vector<Edge> edges[2];  // band b's left-edge inputs at b * TR + r, by cycle parity
static std::vector<std::vector<TileStep>> order;  // per band, its tiles in evaluation order
static CData grid_en = 0;
static int parity = 0;

// A band's rising edge: its tiles from the bottom right, so every tile reads its left and
// upper neighbours' registers before they take the edge; the edge buffers (written in the
// previous cycle, read by parity) carry what crosses to the next band.
static void step_band(int b) {{
  const Edge* ein = edges[parity].data();
  Edge* eout = edges[parity ^ 1].data();
  for (const TileStep& s : order[b]) {{
    Vtile* const t = s.t;
    if (s.left) {{ t->i_x = s.left->o_x; t->i_tag = s.left->o_tag; }}
    else if (s.edge_in < 0) {{ t->i_x = g_rows[s.row].x; t->i_tag = g_rows[s.row].tag; }}
    else {{ const Edge& e = ein[s.edge_in * TR + s.row]; t->i_x = e.x; t->i_tag = e.tag; }}
    if (s.entry >= 0) {{
      t->i_ls = g_ls_rows[s.entry * TR + s.row]; t->i_ls_ctl = g_lsc_rows[s.entry * TR + s.row];
    }} else if (s.left) {{ t->i_ls = s.left->o_ls; t->i_ls_ctl = s.left->o_ls_ctl; }}
    else {{ const Edge& e = ein[s.edge_in * TR + s.row]; t->i_ls = e.ls; t->i_ls_ctl = e.lsc; }}
    if (s.up) t->i_psum = s.up->o_psum;
    t->en = grid_en;
    TILE_RISE(t);
    if (s.edge_out >= 0) {{
      Edge& e = eout[s.edge_out * TR + s.row];
      e.x = t->o_x; e.tag = t->o_tag; e.ls = t->o_ls; e.lsc = t->o_ls_ctl;
    }}
    if (s.psum_word >= 0) get_words(t->o_psum, &g_psum[s.psum_word]);
  }}
}}

// Where the time goes (NCRTL_BAND_PHASES set: printed on stderr at exit).
using Clock = std::chrono::steady_clock;
static bool phases = false;
static Clock::time_point ph_mark;
static double ph_gap = 0, ph_settle = 0, ph_run = 0, ph_copy = 0, ph_engine = 0, ph_thread[64];
static uint64_t ph_cycles = 0;
static double ph_s(Clock::time_point a, Clock::time_point b) {{
  return std::chrono::duration<double>(b - a).count();
}}
struct PhaseReport {{
  ~PhaseReport() {{
    if (!phases || !ph_cycles) return;
    const double us = 1e6 / ph_cycles;
    std::fprintf(stderr, "phases per cycle (us): engine clk=0 and players %.2f, settle copies "
                 "%.2f, parallel step %.2f (engine clk=1 %.2f", ph_gap * us, ph_settle * us,
                 ph_run * us, ph_engine * us);
    for (int t = 0; t < 64 && ph_thread[t] > 0; ++t)
      std::fprintf(stderr, ", thread %d %.2f", t, ph_thread[t] * us);
    std::fprintf(stderr, "), psum copy %.2f\\n", ph_copy * us);
  }}
}} ph_report;
"""
    setup = """
  const int n_threads = argc > 2 ? std::max(1, std::atoi(argv[2])) : 1;
  phases = std::getenv("NCRTL_BAND_PHASES") != nullptr;
  std::vector<std::unique_ptr<VerilatedContext>> band_ctx;  // one per band: one thread each
  std::vector<std::unique_ptr<Vtile>> tiles(TR * TC);
  for (int b = 0; b < NB; ++b) {
    band_ctx.emplace_back(new VerilatedContext);
    for (int j = 0; j < BT; ++j)
      for (int r = 0; r < TR; ++r) {
        const int c = b * BT + j;
        const std::string name = "tile_" + std::to_string(r) + "_" + std::to_string(c);
        Vtile* const t = new Vtile{band_ctx.back().get(), name.c_str()};
        tiles[r * TC + c].reset(t);
        t->clk = 0; t->rst = 0; t->eval();
      }
  }
  order.assign(NB, {});
  for (int b = 0; b < NB; ++b)
    for (int j = BT - 1; j >= 0; --j)
      for (int r = TR - 1; r >= 0; --r) {
        const int c = b * BT + j, col = c * BLOCK;
        order[b].push_back(TileStep{
            tiles[r * TC + c].get(), j ? tiles[r * TC + c - 1].get() : nullptr,
            r ? tiles[(r - 1) * TC + c].get() : nullptr, r, j == 0 && b > 0 ? b : -1,
            col % CHAIN == 0 ? col / CHAIN : -1, j == BT - 1 && b + 1 < NB ? b + 1 : -1,
            r == TR - 1 ? col : -1});
      }
  edges[0].assign(NB * TR, Edge{}); edges[1].assign(NB * TR, Edge{});
  for (int b = 1; b < NB; ++b)
    for (int r = 0; r < TR; ++r) {
      const Vtile* t = tiles[r * TC + b * BT - 1].get();
      Edge& e = edges[0][b * TR + r];
      e.x = t->o_x; e.tag = t->o_tag; e.ls = t->o_ls; e.lsc = t->o_ls_ctl;
    }
  Pool pool;
  pool.start(std::min(n_threads, NB), [&](int t) {
    const Clock::time_point a = phases ? Clock::now() : Clock::time_point{};
    if (t == 0) {
      top.clk = 1; top.eval();
      if (phases) ph_engine += ph_s(a, Clock::now());
    }
    for (int b = t; b < NB; b += pool.n) step_band(b);
    if (phases) ph_thread[t] += ph_s(a, Clock::now());
  });
  ph_mark = Clock::now();
"""
    settle = f"""
    Clock::time_point ph_a;
    if (phases) {{ ph_a = Clock::now(); ph_gap += ph_s(ph_mark, ph_a); }}
    grid_en = top.o_grid_en;
    get_words(top.o_grid_x, g_x.data()); get_words(top.o_grid_tag, g_tag.data());
    get_words(top.o_grid_ls, g_ls.data()); get_words(top.o_grid_ls_ctl, g_lsc.data());
    for (int r = 0; r < TR; ++r) {{
      extract_bits(g_tmp.data(), g_x.data(), r * {B * W}, {B * W}); put_words(g_rows[r].x, g_tmp.data());
      extract_bits(g_tmp.data(), g_tag.data(), r * {B * T}, {B * T}); put_words(g_rows[r].tag, g_tmp.data());
      for (int k = 0; k < {chains}; ++k) {{
        extract_bits(g_tmp.data(), g_ls.data(), (k * {rows} + r * BLOCK) * {S}, {B * S});
        put_words(g_ls_rows[k * TR + r], g_tmp.data());
        extract_bits(g_tmp.data(), g_lsc.data(), (k * {rows} + r * BLOCK) * {L}, {B * L});
        put_words(g_lsc_rows[k * TR + r], g_tmp.data());
      }}
    }}
    if (phases) ph_settle += ph_s(ph_a, Clock::now());"""
    rise = (
        "const Clock::time_point ph_a = phases ? Clock::now() : Clock::time_point{}; "
        "pool.run(); parity ^= 1; "
        "const Clock::time_point ph_b = phases ? Clock::now() : Clock::time_point{}; "
        "put_words(top.i_grid_psum, g_psum.data()); "
        "if (phases) { ph_mark = Clock::now(); ph_run += ph_s(ph_a, ph_b); "
        "ph_copy += ph_s(ph_b, ph_mark); ++ph_cycles; }"
    )
    return {"head": head, "setup": setup, "settle": settle, "rise": rise}


class BandBuild:
    """A built band loop: ``binary`` and the seconds of the build's parts (``verilog``: the
    Verilog generation, ``band``: the tile library's compile, ``loop``: the engine and the
    loop; 0 where cached)."""

    def __init__(self, binary, parts):
        self.binary, self.parts = binary, dict(parts)

    def run(self, folder, threads=1):
        """Run on the player files in ``folder`` with ``threads`` threads: ``(cycles,
        seconds)``, as :func:`ncrtl.testbench.stream_loop.run_loop`."""
        from ncrtl.testbench.stream_loop import run_loop

        return run_loop(self.binary, folder, threads)


#: PEs per side of the loop's tiles (where the band's columns allow): measured at 128 x 128 on
#: 2 cores, tiles of 2 x 2 PEs run the all-mode PE 1.5x faster than 4 x 4 and 2.5x faster than
#: 8 x 8 (a Verilated tile has its own code for each PE it holds: the all-mode PE's code of a
#: large tile does not stay in the instruction cache), the bf16-family PE as fast as 8 x 8.
TILE_BLOCK = 2

#: The C++ optimization of the tile library (the project's builds use ``OPT_FAST=-O1`` for
#: their build time; the tile is small and compiled once).
OPT = "-O2"


def tile_clock_member(obj):
    """The member of the Verilated tile's root class (``obj/Vtile___024root.h``) that holds the
    clock's value at the last evaluation (the rising-edge trigger compares with it), or None."""
    text = (Path(obj) / "Vtile___024root.h").read_text()
    found = sorted(set(re.findall(r"\b(__Vtrigprevexpr\w*__clk__\d+)\b", text)))
    return found[0] if len(found) == 1 else None


def _build_tile_library(text, directory, env, executable, *, opt, inline_pe):
    """Verilate the tile module (``text``: :func:`~ncrtl.hdl.tensor_engine.band.tile_verilog`; ``--prefix Vtile``,
    ``--top-module te_tile``, flat) into a static library under ``directory``; return the
    archives to link."""
    from ncrtl.testbench.sim import BuildError

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tile.v").write_text(text)
    extra = []
    if inline_pe:
        (directory / "tile.vlt").write_text(f'`verilator_config\ninline -module "{PE_MODULE}"\n')
        extra.append(str(directory / "tile.vlt"))
    cmd = [
        str(executable),
        "--cc",
        "--build",
        "-j",
        "0",
        "-Wno-fatal",
        "--prefix",
        "Vtile",
        "--top-module",
        TILE_MODULE,
        *(["-CFLAGS", opt] if opt else []),
        "-Mdir",
        str(directory / "obj"),
        *extra,
        str(directory / "tile.v"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=directory)
    if proc.returncode:
        raise BuildError(f"tile library build failed:\n{(proc.stdout + proc.stderr)[-4000:]}")
    libs = [directory / "obj" / "Vtile__ALL.a"]
    missing = [str(p) for p in libs if not p.is_file()]
    if missing:
        raise BuildError(f"tile library build made no {', '.join(missing)}")
    return libs


def build_band_loop(
    rows,
    cols,
    bands,
    *,
    tile_unit=32,
    modes=None,
    directory=None,
    block=None,
    opt=OPT,
    inline_pe=False,
    one_eval=True,
):
    """Build the band loop of a ``rows x cols`` engine (its PE built for ``modes``) cut into
    ``bands`` column bands: a :class:`BandBuild` (cached under the build root by the hash of
    the Verilog, the loop and the tools: a second call finds it).

    ``block``: PEs per side of a tile (None: :data:`TILE_BLOCK` where it divides the band's
    columns and chains, else 1); ``opt``: the C++ optimization of the tile library (the
    engine and the loop keep the project's); ``inline_pe``: the PE inlined into its tile (less
    state per PE, slower here); ``one_eval``: a tile takes its edge in one evaluation
    (:func:`band_hooks`' ``tile_prev``)."""
    from ncrtl.testbench.sim import _locked, build_root, compile_env, find_verilator
    from ncrtl.testbench.stream_loop import build_loop
    from ncrtl.testbench.tensor_engine.test_tensor_engine import player_ports

    t0 = time.perf_counter()
    engine = TensorEngine(rows, cols, tile_unit=tile_unit, modes=modes, external_grid=True)
    chain = engine.array.chain_width
    plan = band_plan(cols, bands, chain)
    width = cols // bands
    if block is None:
        block = min(TILE_BLOCK, default_block(rows, width, min(width, chain)))
    if rows % block or width % block or (width > chain and chain % block):
        raise ValueError(
            f"block {block} must divide rows={rows}, the band's {width} columns and the "
            f"chain width {chain}"
        )
    top = f"tensor_engine_{rows}x{cols}_grid"
    engine_text = convert(engine, top)
    tile_text = tile_verilog(block, modes)
    verilog = time.perf_counter() - t0
    install = find_verilator()
    if directory is None:
        key = hashlib.sha256()
        for part in (tile_text, install.version, install.env.get("MAKEFLAGS", ""), opt or ""):
            key.update(part.encode() + b"\0")
        key.update(b"inline" if inline_pe else b"")
        directory = build_root() / f"te_tile_{block}-{key.hexdigest()[:16]}"
    directory = Path(directory)
    env = {**os.environ, **compile_env(install)}
    with _locked(directory.with_name(directory.name + ".lock")):
        done = directory / "built"
        if done.is_file():
            libs = [Path(p) for p in done.read_text().split()]
        else:
            libs = _build_tile_library(
                tile_text, directory, env, install.executable, opt=opt, inline_pe=inline_pe
            )
            done.write_text("\n".join(map(str, libs)))
    t1 = time.perf_counter()
    obj = directory / "obj"
    prev = tile_clock_member(obj) if one_eval else None
    args = ["-CFLAGS", f"-I{obj}", "-LDFLAGS", " ".join(map(str, libs))]
    binary, loop_s = build_loop(
        engine_text,
        top,
        player_ports(rows, cols, tile_unit),
        extra_args=args,
        hooks=band_hooks(rows, cols, plan, block=block, tile_prev=prev),
    )
    return BandBuild(binary, {"verilog": verilog, "band": t1 - t0 - verilog, "loop": loop_s})
