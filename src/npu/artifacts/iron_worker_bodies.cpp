// IRON emitter: the core workers' bodies (iron_emitter_internal.h): a kernel core's loops over the
// FIFO objects it touches, a core's program step by step, and the encoder attention core's units.
#include "npu/artifacts/iron_emitter_internal.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

#include "npu/design_families.h"

namespace xdna::npu::iron {

namespace {

std::string f32_type(int64_t n) { return "np.ndarray[(" + std::to_string(n) + ",), np.dtype[np.float32]]"; }

}  // namespace

// The worker's body, and the calls it makes (each needs a Kernel declaration of its own
// signature). FIFOs passing one object per invocation are acquired around everything; the
// others nest by object count when each count divides the next (gemv, gemm, streams: exact);
// when they do not (fused designs), each count gets its own loop and its own kernel entry point,
// in design order, and the kernel to be written defines what each stage does.
std::vector<Call> emit_worker_body(std::ostringstream& o, const std::string& fn, const CoreIo& io,
                                   const std::vector<std::string>& kernel_params,
                                   const std::vector<std::pair<std::string, int64_t>>& scalar_args,
                                   const std::string& zero_param,
                                   const std::vector<std::pair<std::string, std::string>>& runtime) {
  std::vector<const ObjectFifo*> all = io.consumes;
  all.insert(all.end(), io.produces.begin(), io.produces.end());
  std::set<int64_t> counts;
  for (const ObjectFifo* f : all)
    if (f->objects > 1) counts.insert(f->objects);
  const std::vector<int64_t> levels(counts.begin(), counts.end());
  bool nests = true;
  for (size_t i = 1; i < levels.size(); ++i) nests = nests && levels[i] % levels[i - 1] == 0;

  o << "def " << fn << "(";
  for (const ObjectFifo* f : all) o << py_ident(f->name) << ", ";
  for (size_t i = 0; i < kernel_params.size(); ++i) o << (i ? ", " : "") << kernel_params[i];
  if (!zero_param.empty()) o << ", " << zero_param;
  o << "):\n";
  std::string scalars;
  for (const auto& [name, v] : scalar_args) scalars += ", " + std::to_string(v);
  for (const auto& [name, constant] : runtime) scalars += ", " + constant;
  auto with_count = [&](int64_t n) {
    std::vector<const ObjectFifo*> out;
    for (const ObjectFifo* f : all)
      if (f->objects == n) out.push_back(f);
    return out;
  };
  auto acquire = [&](int64_t n, const std::string& ind) {
    for (const ObjectFifo* f : with_count(n))
      o << ind << "e_" << py_ident(f->name) << " = " << py_ident(f->name) << ".acquire(1)\n";
  };
  auto release = [&](int64_t n, const std::string& ind) {
    for (const ObjectFifo* f : with_count(n)) o << ind << py_ident(f->name) << ".release(1)\n";
  };
  std::vector<Call> calls;
  auto call = [&](const std::string& ind, const std::vector<int64_t>& live) {
    Call c;
    for (const ObjectFifo* f : all)
      if (std::find(live.begin(), live.end(), f->objects) != live.end()) c.fifos.push_back(f);
    o << ind << kernel_params[calls.size()] << "(";
    for (size_t i = 0; i < c.fifos.size(); ++i) o << (i ? ", " : "") << "e_" << py_ident(c.fifos[i]->name);
    o << (c.fifos.empty() && !scalars.empty() ? scalars.substr(2) : scalars) << ")\n";
    calls.push_back(c);
  };
  acquire(1, "    ");
  if (levels.empty()) {
    call("    ", {1});
  } else if (nests) {
    std::vector<int64_t> live = {1};
    std::string ind = "    ";
    int64_t outer = 1;
    for (int64_t n : levels) {
      o << ind << "for _ in range_(" << n / outer << "):\n";
      ind += "    ";
      acquire(n, ind);
      // An accumulating library kernel: clear the output object it accumulates into.
      if (!zero_param.empty() && n != levels.back())
        for (const ObjectFifo* f : with_count(n))
          if (std::find(io.produces.begin(), io.produces.end(), f) != io.produces.end())
            o << ind << zero_param << "(e_" << py_ident(f->name) << ")\n";
      live.push_back(n);
      outer = n;
    }
    call(ind, live);
    for (auto it = levels.rbegin(); it != levels.rend(); ++it) {
      release(*it, ind);
      ind.resize(ind.size() - 4);
    }
  } else {
    o << "    # Stage loops by object count: a placeholder order; the fused kernel (not yet\n"
      << "    # written) fixes the real interleaving of its DDR stream and exchanges.\n";
    for (int64_t n : levels) {
      o << "    for _ in range_(" << n << "):\n";
      acquire(n, "        ");
      call("        ", {1, n});
      release(n, "        ");
    }
  }
  release(1, "    ");
  o << "\n\n";
  return calls;
}

// A core with a program (design.h CoreStep): the worker body is the program, step by step:
// acquire / release one object, call an entry point on the acquired objects with its int32
// scalars (name order, then the runtime constants), loops as range_. Returns each entry point
// called, with its argument types, in first-call order.
std::vector<std::pair<std::string, std::string>> emit_program_body(
    std::ostringstream& o, const std::string& design, const std::string& fn, const TileUse& t, const CoreIo& io,
    const std::vector<std::pair<std::string, std::string>>& runtime) {
  check_core_program(design, t);
  std::vector<const ObjectFifo*> all = io.consumes;
  all.insert(all.end(), io.produces.begin(), io.produces.end());
  auto fifo = [&](const std::string& name) -> const ObjectFifo* {
    for (const ObjectFifo* f : all)
      if (f->name == name) return f;
    throw std::invalid_argument("emit_iron: design " + design + ": core " + to_string(t.at) +
                                " program uses FIFO " + name + " it is not an end of");
  };
  std::vector<std::pair<std::string, std::string>> entries;  // entry point -> argument types
  auto handle = [&](const CoreStep& s) {
    std::string types;
    for (const std::string& f : s.operands) types += (types.empty() ? "" : ", ") + bytes_type(fifo(f)->elem_bytes);
    for (size_t i = 0; i < s.args.size() + runtime.size(); ++i) types += (types.empty() ? "" : ", ") + std::string("np.int32");
    for (const auto& [name, ty] : entries)
      if (name == s.name) {
        if (ty != types)
          throw std::invalid_argument("emit_iron: design " + design + ": entry point " + s.name +
                                      " is called with two signatures");
        return "k_" + py_ident(name);
      }
    entries.push_back({s.name, types});
    return "k_" + py_ident(s.name);
  };
  // First pass: the entry points (the worker's parameters).
  for (const CoreStep& s : t.program)
    if (s.op == CoreOp::Call) handle(s);
  o << "def " << fn << "(";
  for (const ObjectFifo* f : all) o << py_ident(f->name) << ", ";
  for (size_t i = 0; i < entries.size(); ++i) o << (i ? ", " : "") << "k_" << py_ident(entries[i].first);
  o << "):\n";
  std::vector<size_t> loop_end;
  std::string ind = "    ";
  for (size_t i = 0; i < t.program.size(); ++i) {
    while (!loop_end.empty() && loop_end.back() == i) loop_end.pop_back(), ind.resize(ind.size() - 4);
    const CoreStep& s = t.program[i];
    switch (s.op) {
      case CoreOp::Loop:
        o << ind << "for _ in range_(" << s.count << "):\n";
        loop_end.push_back(i + 1 + size_t(s.body));
        ind += "    ";
        break;
      case CoreOp::Acquire:
        fifo(s.name);
        o << ind << "e_" << py_ident(s.name) << " = " << py_ident(s.name) << ".acquire(1)\n";
        break;
      case CoreOp::Release:
        o << ind << py_ident(s.name) << ".release(1)\n";
        break;
      case CoreOp::Call: {
        o << ind << handle(s) << "(";
        std::string sep;
        for (const std::string& f : s.operands) o << sep << "e_" << py_ident(f), sep = ", ";
        for (const auto& [name, v] : s.args) o << sep << v, sep = ", ";
        for (const auto& [name, constant] : runtime) o << sep << constant, sep = ", ";
        o << ")\n";
        break;
      }
    }
  }
  o << "\n\n";
  return entries;
}

// An encoder attention core (design_families_encoder.cpp) runs the units of its column in the
// order npu-sim runs them (encoder_attention_units): per unit, take its query rows, clear the
// running max / sum / output, one call per K/V block its rows can see (key position b * kv_block),
// then write the normalised rows into an output object. The units differ in their numbers, so
// the body loops over them in Python (unrolled when IRON traces the worker: a long sequence
// grows the core's program memory; aiecc reports it if it overflows). m, l, o and scores are the
// core's own L1 (LocalBuffer). Writes the kernel handles once (`declared`); returns the worker.
std::string emit_encoder_attention_worker(std::ostringstream& o, const Design& d, const TileUse& t,
                                          std::map<std::string, std::string>& var, bool& declared) {
  auto param = [&](const char* key) {
    auto it = d.params.find(key);
    if (it == d.params.end())
      throw std::invalid_argument("emit_iron: design " + d.name + ": encoder attention design lacks param " + key);
    return it->second;
  };
  EncoderAttentionShape s;
  s.T = param("T"), s.S = param("S"), s.heads = param("heads"), s.kv_heads = param("kv_heads");
  s.head_dim = param("head_dim"), s.causal = param("causal") != 0, s.window = param("window");
  const int64_t tq = param("q_tile"), kb = param("kv_block"), D = s.head_dim;
  const int columns = int(param("columns"));
  const int c = t.at.col, r = t.at.row - kAie2p.first_compute_row;
  const std::string q = gen::crname("q", c, r), kv = gen::cname("kv", c), out = gen::crname("out", c, r);
  std::map<std::string, const ObjectFifo*> f;
  for (const std::string& n : {q, kv, out}) {
    f[n] = d.find_fifo(n);
    if (!f[n] || !var.count(n))
      throw std::invalid_argument("emit_iron: design " + d.name + ": encoder core " + to_string(t.at) + " has no FIFO " + n);
  }
  const std::string scalars9 = "np.int32, np.int32, np.int32, np.int32, np.int32, np.int32, np.int32, np.int32, np.int32";
  if (!declared) {
    const float scale = 1.0f / std::sqrt(float(D));
    o << "# kernel source: aie_kernels/attention_encoder_bf16.cc (exports attention_encoder_bf16_init, "
         "attention_encoder_bf16, attention_encoder_bf16_finish; npu: needs hardware and the toolchain, unverified)\n"
      << "ATTN_SCALE_BITS = " << f32_bits(scale) << "  # f32 " << scale
      << ": score scale 1 / sqrt(head_dim) (set the model's own if it differs)\n"
      << "k_attention_encoder_bf16_init = Kernel(\"attention_encoder_bf16_init\", \"attention_encoder_bf16.o\", ["
      << f32_type(tq) << ", " << f32_type(tq) << ", " << f32_type(tq * D) << ", np.int32, np.int32])\n"
      << "k_attention_encoder_bf16 = Kernel(\"attention_encoder_bf16\", \"attention_encoder_bf16.o\", ["
      << bytes_type(f[q]->elem_bytes) << ", " << bytes_type(f[kv]->elem_bytes) << ", " << f32_type(tq) << ", "
      << f32_type(tq) << ", " << f32_type(tq * D) << ", " << f32_type(kb) << ", " << scalars9 << "])\n"
      << "k_attention_encoder_bf16_finish = Kernel(\"attention_encoder_bf16_finish\", \"attention_encoder_bf16.o\", ["
      << f32_type(tq) << ", " << f32_type(tq * D) << ", " << bytes_type(f[out]->elem_bytes) << ", np.int32, np.int32])\n\n";
    declared = true;
  }
  const std::string fn = "core_" + std::to_string(t.at.col) + "_" + std::to_string(t.at.row);
  const std::string tag = std::to_string(t.at.col) + "_" + std::to_string(t.at.row);
  const std::string pq = py_ident(q), pkv = py_ident(kv), pout = py_ident(out);
  std::string units;
  for (const EncoderAttentionUnit& u : encoder_attention_units(s, tq, kb, columns, c))
    units += (units.empty() ? "" : ", ") + std::string("(") + std::to_string(u.q0 + r * tq) + ", " +
             std::to_string(u.b0) + ", " + std::to_string(u.b1) + ")";
  o << "def " << fn << "(" << pq << ", " << pkv << ", " << pout
    << ", k_attention_encoder_bf16_init, k_attention_encoder_bf16, k_attention_encoder_bf16_finish):\n"
    << "    m = LocalBuffer(" << f32_type(tq) << ", name=\"m_" << tag << "\")\n"
    << "    l = LocalBuffer(" << f32_type(tq) << ", name=\"l_" << tag << "\")\n"
    << "    o = LocalBuffer(" << f32_type(tq * D) << ", name=\"o_" << tag << "\")\n"
    << "    scores = LocalBuffer(" << f32_type(kb) << ", name=\"scores_" << tag << "\")\n"
    << "    # Units of column " << c << ": (query position of this core's rows, first K/V block, end block)\n"
    << "    for q_pos0, b0, b1 in [" << units << "]:\n"
    << "        e_" << pq << " = " << pq << ".acquire(1)\n"
    << "        k_attention_encoder_bf16_init(m, l, o, " << tq << ", " << D << ")\n"
    << "        for b in range(b0, b1):\n"
    << "            e_" << pkv << " = " << pkv << ".acquire(1)\n"
    << "            k_attention_encoder_bf16(e_" << pq << ", e_" << pkv << ", m, l, o, scores, " << tq << ", " << kb
    << ", " << D << ", q_pos0, b * " << kb << ", " << s.S << ", " << (s.causal ? 1 : 0) << ", " << s.window
    << ", ATTN_SCALE_BITS)\n"
    << "            " << pkv << ".release(1)\n"
    << "        e_" << pout << " = " << pout << ".acquire(1)\n"
    << "        k_attention_encoder_bf16_finish(l, o, e_" << pout << ", " << tq << ", " << D << ")\n"
    << "        " << pout << ".release(1)\n"
    << "        " << pq << ".release(1)\n\n\n";
  return emit_worker(o, t, fn,
                     var[q] + ".cons(), " + var[kv] + ".cons(), " + var[out] +
                         ".prod(), k_attention_encoder_bf16_init, k_attention_encoder_bf16, "
                         "k_attention_encoder_bf16_finish",
                     "the worker's LocalBuffers");
}

// How many kernel calls a core's body makes (see emit_worker_body).
size_t call_count(const CoreIo& io) {
  std::set<int64_t> counts;
  for (const auto* list : {&io.consumes, &io.produces})
    for (const ObjectFifo* f : *list)
      if (f->objects > 1) counts.insert(f->objects);
  const std::vector<int64_t> levels(counts.begin(), counts.end());
  for (size_t i = 1; i < levels.size(); ++i)
    if (levels[i] % levels[i - 1] != 0) return levels.size();
  return 1;
}

}  // namespace xdna::npu::iron
