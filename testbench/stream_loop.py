"""The reference the stream players are measured against: a design driven by a C++ loop.

``ncrtl bench`` asks what the testbench costs on top of the simulated hardware.  The answer
needs the same Verilated design stepped with no testbench at all: :func:`loop_cpp` generates a
``main.cpp`` that does, in C++, exactly what the Verilog players of :mod:`ncrtl.testbench.player`
do (the same files, the same idle cycles, the same seeded backpressure, the same clock and
reset sequence, the same ``done`` rule), with every source file read into memory before the
clock starts.  It writes the recorder and strobe files in the players' format, so a run of the
loop and a run of the testbench on the same files can be compared byte for byte: the figures of
the two are only compared when the loop reproduced every output beat and cycle.

Built with the design's own Verilator arguments (``--hierarchical`` and ``--threads`` included)
and the project's ``OPT_FAST`` (:func:`ncrtl.testbench.sim.find_verilator`), without cocotb's
VPI and its clock.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

__all__ = ["loop_cpp", "build_loop", "run_loop", "RESET_EDGES"]

#: Rising edges with reset high and ``go`` low before the run, as the testbench drives them.
RESET_EDGES = 2


def _c(name):
    """A port's member name in the Verilated class (Verilator spells ``__`` as ``___05F``)."""
    return name.replace("__", "___05F")


def _words(width):
    return (width + 31) // 32


def _put(port, width, src):
    """C++ statement: drive the input ``port`` from the 32-bit words at ``src``."""
    if width <= 32:
        return f"top.{_c(port)} = {src}[0];"
    if width <= 64:
        return f"top.{_c(port)} = (uint64_t){src}[0] | ((uint64_t){src}[1] << 32);"
    return f"for (int i = 0; i < {_words(width)}; ++i) top.{_c(port)}[i] = {src}[i];"


def _get(port, width, dst):
    """C++ statement: read the output ``port`` into the 32-bit words at ``dst``."""
    if width <= 32:
        return f"{dst}[0] = (uint32_t)top.{_c(port)};"
    if width <= 64:
        return f"{dst}[0] = (uint32_t)top.{_c(port)}; {dst}[1] = (uint32_t)(top.{_c(port)} >> 32);"
    return f"for (int i = 0; i < {_words(width)}; ++i) {dst}[i] = top.{_c(port)}[i];"


def loop_cpp(top, ports, *, clock="clk", reset="rst", hooks=None):
    """``main.cpp`` stepping the Verilated ``top`` as the players of ``ports`` would.

    Usage of the binary: ``loop FOLDER`` reads ``FOLDER/config`` and ``FOLDER/<source>.in``,
    writes ``FOLDER/<source>.log``, ``<sink>.out`` and ``<strobe>.out``, and prints
    ``<cycles from go to done> <ns>`` (the wall time of those cycles alone).

    ``hooks``: C++ text that steps more models beside ``top`` (the column bands of
    :mod:`ncrtl.testbench.tensor_engine.band_loop`): ``head`` (includes and declarations),
    ``setup`` (after ``top`` is made; ``argv[2]`` onwards are the hook's), ``settle`` (after
    every ``clk = 0`` evaluation of ``top``: its outputs are then the values before the next
    edge) and ``rise`` (the rising edge, instead of ``top.clk = 1; top.eval();``).
    """
    hooks = {"head": "", "setup": "", "settle": "", "rise": "", **(hooks or {})}
    rise = hooks["rise"] or f"top.{clock} = 1; top.eval();"
    src = [p for p in ports if p.kind == "source"]
    snk = [p for p in ports if p.kind == "sink"]
    stb = [p for p in ports if p.kind == "strobe"]
    tie = [p for p in ports if p.kind == "tie"]
    decl, load, sample, apply_, init, close = [], [], [], [], [], []
    for p in tie:
        init.append(f"  {_put(p.name, p.width, f'tie_{p.name}')}")
        decl.append(
            f"static const uint32_t tie_{p.name}[{_words(p.width)}] = {{"
            + ", ".join(
                f"0x{(int(p.value or 0) >> (32 * i)) & 0xFFFFFFFF:x}u"
                for i in range(_words(p.width))
            )
            + "};"
        )
    for p in src:
        n, w = p.name, _words(p.width)
        decl.append(f"static Source {n}_s({w});")
        load.append(
            f'  if (!{n}_s.load(dir + "/{n}.in") || '
            f'!({n}_s.log = std::fopen((dir + "/{n}.log").c_str(), "w"))) return 3;'
        )
        sample.append(f"    {n}_s.step(top.{_c(n + '__ready')}, cycle);")
        apply_.append(
            f"    top.{_c(n + '__valid')} = {n}_s.valid; {_put(f'{n}__payload', p.width, f'{n}_s.payload()')}"
        )
        close.append(f"  std::fclose({n}_s.log);")
    for i, p in enumerate(snk):
        n, w = p.name, _words(p.width)
        seed_mix = 0x9E3779B9 * (i + 1) & 0xFFFFFFFF
        decl.append(f"static Sink {n}_k({w}, {(p.width + 3) // 4});")
        load.append(
            f'  if (!({n}_k.out = std::fopen((dir + "/{n}.out").c_str(), "w"))) return 3;\n'
            f"  {n}_k.rng = seed ^ 0x{seed_mix:08x}u;"
        )
        sample.append(
            f"    if (top.{_c(n + '__valid')} && {n}_k.ready) {{ {_get(f'{n}__payload', p.width, f'{n}_k.word.data()')}"
            f" {n}_k.record(cycle); ++received_next; }}\n"
            f"    {n}_k.draw(threshold);"
        )
        apply_.append(f"    top.{_c(n + '__ready')} = {n}_k.ready;")
        close.append(f"  std::fclose({n}_k.out);")
    for p in stb:
        n = p.name
        val = f"(unsigned long long)top.{_c(p.value)}" if p.value else "1ull"
        decl.append(f"static std::FILE* {n}_f;")
        load.append(f'  if (!({n}_f = std::fopen((dir + "/{n}.out").c_str(), "w"))) return 3;')
        sample.append(
            f'    if (top.{_c(n)}) std::fprintf({n}_f, "%llu %llu\\n", (unsigned long long)cycle + 1, {val});'
        )
        close.append(f"  std::fclose({n}_f);")
    sent = " && ".join([f"{p.name}_s.eof && !{p.name}_s.valid" for p in src] or ["true"])
    nl = "\n"
    return f"""// Generated by ncrtl.testbench.stream_loop: the stream players' work in a C++ loop.
#include "V{top}.h"
#include "verilated.h"
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
{hooks["head"]}
// A source player: beats preloaded with their idle cycles; valid and payload registered.
struct Source {{
  explicit Source(int w) : words(w) {{}}
  int words;
  std::vector<uint32_t> data;
  std::vector<long> idle;
  size_t next = 0, cur = 0;
  bool valid = false, have = false, eof = false, valid_next = false;
  size_t payload_next = 0;
  long wait = 0;
  std::FILE* log = nullptr;
  std::vector<uint32_t> zero = std::vector<uint32_t>(words, 0);
  const uint32_t* payload() const {{
    return data.empty() ? zero.data() : &data[cur * (size_t)words];
  }}
  bool load(const std::string& path) {{
    std::FILE* f = std::fopen(path.c_str(), "r");
    if (!f) {{ std::perror(path.c_str()); return false; }}
    char* line = nullptr; size_t cap = 0; ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0) {{
      char* sp = std::strchr(line, ' ');
      if (!sp) continue;
      idle.push_back(std::atol(line));
      char* h = sp + 1; size_t n = std::strcspn(h, "\\r\\n");
      size_t base = data.size(); data.resize(base + words, 0);
      for (size_t i = 0; i < n; ++i) {{  // hex digits, most significant first
        char c = h[n - 1 - i];
        uint32_t d = c <= '9' ? c - '0' : (c | 32) - 'a' + 10;
        if (i / 8 < (size_t)words) data[base + i / 8] |= d << (4 * (i % 8));
      }}
    }}
    std::free(line); std::fclose(f);
    return true;
  }}
  // One rising edge, from the values before it (the players' always block).
  void step(bool ready, uint64_t cycle) {{
    valid_next = valid; payload_next = cur;
    if (valid && ready) std::fprintf(log, "%llu\\n", (unsigned long long)cycle + 1);
    if (!valid || ready) {{
      if (!have && !eof) {{
        if (next < idle.size()) {{ have = true; wait = idle[next]; payload_next = next++; }}
        else eof = true;
      }}
      if (have && wait == 0) {{ valid_next = true; have = false; }}
      else {{ valid_next = false; if (have) --wait; }}
    }}
  }}
  void commit() {{ valid = valid_next; cur = payload_next; }}
}};

// A sink recorder: ready from a seeded xorshift, registered; transfers written in hex.
struct Sink {{
  Sink(int w, int digits) : word(w, 0), digits(digits) {{}}
  std::vector<uint32_t> word;
  int digits;
  uint32_t rng = 1;
  bool ready = false, ready_next = false;
  std::FILE* out = nullptr;
  void record(uint64_t cycle) {{
    std::fprintf(out, "%llu ", (unsigned long long)cycle + 1);
    for (int i = digits - 1; i >= 0; --i)
      std::fputc("0123456789abcdef"[(word[i / 8] >> (4 * (i % 8))) & 15], out);
    std::fputc('\\n', out);
  }}
  void draw(uint32_t threshold) {{
    rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5;
    ready_next = (rng >> 16) >= (threshold & 0xFFFF);
  }}
}};

{nl.join(decl)}

int main(int argc, char** argv) {{
  if (argc < 2) {{ std::fprintf(stderr, "usage: %s FOLDER\\n", argv[0]); return 2; }}
  const std::string dir = argv[1];
  unsigned long long seed_l, threshold_l, expect_l, timeout_l;
  std::FILE* cfg = std::fopen((dir + "/config").c_str(), "r");
  if (!cfg || std::fscanf(cfg, "%llu %llu %llu %llu", &seed_l, &threshold_l, &expect_l,
                          &timeout_l) != 4) {{
    std::fprintf(stderr, "cannot read %s/config\\n", dir.c_str()); return 3;
  }}
  std::fclose(cfg);
  const uint32_t seed = (uint32_t)seed_l, threshold = (uint32_t)threshold_l;
{nl.join(load)}
  VerilatedContext ctx;
  V{top} top{{&ctx}};
{nl.join(init)}
{hooks["setup"]}
  // The clock low and everything settled (then the hook's models read top's outputs); the
  // rising edge of every model.
  auto settle = [&]() {{ top.{clock} = 0; top.eval();
{hooks["settle"]}
  }};
  auto rise = [&]() {{ {rise} }};
  top.{reset} = 1;
  uint64_t cycle = 0;  // rising edges so far (the players' o_cycle)
  for (int i = 0; i < {RESET_EDGES}; ++i) {{
    settle(); rise(); ++cycle;
  }}
  top.{reset} = 0;
  const uint64_t start = cycle;
  uint64_t received = 0, drain = 0;
  bool done = false;
  const auto t0 = std::chrono::steady_clock::now();
  while (!done) {{
    settle();
    uint64_t received_next = received;
{nl.join(sample)}
    if (({sent}) && received >= expect_l) ++drain;
    const bool done_next = drain > 8 || cycle - start >= timeout_l;
    rise(); ++cycle;
{nl.join(f"    {p.name}_s.commit();" for p in src)}
{nl.join(f"    {p.name}_k.ready = {p.name}_k.ready_next;" for p in snk)}
    received = received_next; done = done_next;
{nl.join(apply_)}
  }}
  const auto t1 = std::chrono::steady_clock::now();
{nl.join(close)}
  std::printf("%llu %.0f\\n", (unsigned long long)(cycle - start),
              std::chrono::duration<double, std::nano>(t1 - t0).count());
  return 0;
}}
"""


def build_loop(verilog_text, top, ports, directory=None, *, extra_args=(), hooks=None):
    """Verilate ``top`` with ``extra_args`` and link :func:`loop_cpp` (with its ``hooks``);
    return ``(binary, seconds)``.  ``verilog_text``: the design alone, without its player
    wrapper.

    ``directory`` None: the project's build cache (``<build root>/<top>_loop-<hash>``, the hash
    of the Verilog, the loop, the arguments and the Verilator), so a second call finds the
    binary; concurrent callers wait for one build."""
    import hashlib

    from ncrtl.testbench.sim import _locked, build_executable, build_root, find_verilator

    main = loop_cpp(top, ports, hooks=hooks)
    if directory is None:
        install = find_verilator()
        key = hashlib.sha256()
        for part in (verilog_text, main, *extra_args, install.version):
            key.update(part.encode() + b"\0")
        key.update(install.env.get("MAKEFLAGS", "").encode())
        directory = build_root() / f"{top}_loop-{key.hexdigest()[:16]}"
    directory = Path(directory)
    binary = directory / "obj" / "loop"
    t0 = time.perf_counter()
    with _locked(directory.with_name(directory.name + ".lock")):
        if binary.is_file() and (directory / "built").is_file():
            return binary, time.perf_counter() - t0
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{top}.v").write_text(verilog_text)
        (directory / "main.cpp").write_text(main)
        sources = [directory / f"{top}.v", directory / "main.cpp"]
        build_executable(directory, top, sources, "loop", extra_args=extra_args)
        (directory / "built").write_text("")
    return binary, time.perf_counter() - t0


def run_loop(binary, folder, *args):
    """Run the loop on the player files in ``folder`` (``args``: the hooks' arguments):
    ``(cycles from go to done, seconds)``."""
    proc = subprocess.run(
        [str(binary), str(folder), *map(str, args)], capture_output=True, text=True
    )
    if proc.returncode:
        raise RuntimeError(f"C++ loop failed ({proc.returncode}): {proc.stderr[-2000:]}")
    cycles, ns = proc.stdout.split()
    return int(cycles), float(ns) / 1e9
