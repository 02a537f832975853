// npu-sim's execution of the fused designs (sim_exec.h): what the executors share (sim::), the
// fused split's geometry, run_design, the drained outputs read back, and the two routes through
// one decoder layer. The host arguments' packing: sim_exec_pack.cpp.
#include "npu/sim_exec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "core/graph.h"
#include "core/numeric.h"
#include "npu/sim_backend.h"
#include "npu/sim_program.h"
#include "npu/sim_exec_fused_internal.h"

namespace xdna::npu {

using namespace sim::fused;

void sim::fail(const Design& d, const std::string& what) {
  throw std::invalid_argument("npu-sim: design '" + d.name + "': " + what);
}

int64_t sim::param(const Design& d, const char* name) {
  auto it = d.params.find(name);
  if (it == d.params.end()) fail(d, std::string("has no parameter '") + name + "'");
  return it->second;
}

const SeqStep& sim::drain_step(const Design& d, const std::string& fifo) {
  for (const SeqStep& s : d.sequence)
    if (s.op == SeqOp::Drain && s.fifo == fifo) return s;
  fail(d, "has no drain of '" + fifo + "'");
}

void sim::drain(const Design& d, HostArgs& args, const std::string& fifo, const std::vector<uint8_t>& bytes) {
  drain_step(d, fifo);  // throws when there is none
  int64_t moved = 0;
  for (const SeqStep& s : d.sequence)
    if (s.op == SeqOp::Drain && s.fifo == fifo) moved += s.pattern.bytes();
  if (int64_t(bytes.size()) != moved)
    fail(d, "the programs gave '" + fifo + "' " + std::to_string(bytes.size()) + " bytes, its drains move " +
                std::to_string(moved));
  size_t pos = 0;  // several drains of one FIFO take its stream in sequence order
  for (const SeqStep& s : d.sequence) {
    if (s.op != SeqOp::Drain || s.fifo != fifo) continue;
    std::vector<uint8_t>& a = args.at(size_t(s.arg));
    walk_runs(s.pattern, [&](int64_t off, int64_t run) {
      const size_t n = size_t(run);
      if (off < 0 || size_t(off) + n > a.size()) fail(d, "drain '" + fifo + "' writes past its argument");
      std::memcpy(a.data() + off, bytes.data() + pos, n);
      pos += n;
    });
  }
}

namespace {

using sim::fail;
using sim::param;
using sim::walk_runs;
using sim::drain;
using sim::drain_step;
using sim::core_streams;

}  // namespace

namespace sim::fused {

int arg_index(const Design& d, const std::string& name) {
  for (size_t i = 0; i < d.args.size(); ++i)
    if (d.args[i].name == name) return int(i);
  fail(d, "has no host argument '" + name + "'");
}

Geometry geometry(const Design& d, bool layer) {
  Geometry g;
  for (const TileUse& t : d.tiles)
    if (t.has_kernel) {
      if (t.kernel.dtype != DType::BF16 && t.kernel.dtype != DType::I8)
        fail(d, "kernel dtype " + std::string(dtype_name(t.kernel.dtype)) +
                    ": npu-sim executes bf16 and int8 fused designs (bfp16 is priced, not executed)");
      g.weights = t.kernel.dtype;
      ++g.P;
    }
  if (g.P == 0 || g.P % kCores) fail(d, "has " + std::to_string(g.P) + " cores, not whole columns of 4");
  if (!layer) return g;
  g.heads = param(d, "heads"), g.kv_heads = param(d, "kv_heads"), g.D = param(d, "head_dim");
  if (d.params.count("hidden")) g.hidden = param(d, "hidden");
  if (d.params.count("intermediate")) g.I = param(d, "intermediate");
  if (d.params.count("context")) g.context = param(d, "context");
  g.qk_norm = d.params.count("qk_norm") && param(d, "qk_norm");
  g.post_norms = d.params.count("post_norms") && param(d, "post_norms");
  return g;
}

std::string ddr_fifo(int c) { return "ddr_c" + std::to_string(c) + "_l3l2"; }

}  // namespace sim::fused

void sim::StreamRefs::read(size_t p, size_t i, uint8_t* dst) const {
  const std::vector<Piece>& ps = pieces[p];
  for (uint32_t j = first[p][i]; j < first[p][i + 1]; ++j) {
    std::memcpy(dst, ps[j].src, ps[j].bytes);
    dst += ps[j].bytes;
  }
}

sim::StreamRefs sim::core_stream_refs(const Design& d, const HostArgs& args, int64_t P) {
  StreamRefs out;
  out.pieces.resize(size_t(P));
  out.first.resize(size_t(P));
  for (int c = 0; c < P / kCores; ++c) {
    const std::string fifo = ddr_fifo(c);
    // The column stream [object][core][2 KiB]: each object's pieces listed for its core.
    size_t pos = 0;
    for (const SeqStep& s : d.sequence) {
      if (s.op != SeqOp::Fill || s.fifo != fifo) continue;
      const std::vector<uint8_t>& a = args.at(size_t(s.arg));
      walk_runs(s.pattern, [&](int64_t off, int64_t n) {
        if (off < 0 || off + n > int64_t(a.size()))
          fail(d, "fill of '" + d.args[size_t(s.arg)].name + "' reads past its " + std::to_string(a.size()) + " bytes");
        const uint8_t* src = a.data() + off;
        for (size_t left = size_t(n); left > 0;) {
          const size_t obj = pos / size_t(kObj), in = pos % size_t(kObj), take = std::min(left, size_t(kObj) - in);
          const size_t core = size_t(c * kCores) + obj % kCores;
          std::vector<StreamRefs::Piece>& ps = out.pieces[core];
          if (in == 0) out.first[core].push_back(uint32_t(ps.size()));
          if (in != 0 && ps.back().src + ps.back().bytes == src) ps.back().bytes += take;  // contiguous: one run
          else ps.push_back({src, take});
          pos += take, src += take, left -= take;
        }
      });
    }
    if (pos % (kCores * kObj)) fail(d, "column " + std::to_string(c) + " stream is not whole objects");
  }
  for (size_t p = 0; p < size_t(P); ++p) out.first[p].push_back(uint32_t(out.pieces[p].size()));
  return out;
}

sim::StreamRefs sim::stream_refs(const std::vector<std::vector<uint8_t>>& streams) {
  StreamRefs out;
  out.pieces.resize(streams.size());
  out.first.resize(streams.size());
  for (size_t p = 0; p < streams.size(); ++p) {
    for (size_t o = 0; (o + 1) * size_t(kObj) <= streams[p].size(); ++o) {
      out.first[p].push_back(uint32_t(o));
      out.pieces[p].push_back({streams[p].data() + o * kObj, size_t(kObj)});
    }
    out.first[p].push_back(uint32_t(out.pieces[p].size()));
  }
  return out;
}

std::vector<std::vector<uint8_t>> sim::core_streams(const Design& d, const HostArgs& args, int64_t P) {
  const StreamRefs refs = core_stream_refs(d, args, P);
  std::vector<std::vector<uint8_t>> out(static_cast<size_t>(P));
  for (size_t p = 0; p < size_t(P); ++p) {
    out[p].resize(refs.objects(p) * size_t(kObj));
    for (size_t i = 0; i < refs.objects(p); ++i) refs.read(p, i, out[p].data() + i * kObj);
  }
  return out;
}

namespace sim::fused {

std::vector<uint8_t> read_drain(const Design& d, const HostArgs& args, const std::string& fifo) {
  drain_step(d, fifo);
  std::vector<uint8_t> bytes;
  for (const SeqStep& s : d.sequence) {
    if (s.op != SeqOp::Drain || s.fifo != fifo) continue;
    const std::vector<uint8_t>& a = args.at(size_t(s.arg));
    walk_runs(s.pattern, [&](int64_t off, int64_t run) {
      const size_t n = size_t(run);
      if (off < 0 || size_t(off) + n > a.size()) fail(d, "drain '" + fifo + "' reads past its argument");
      bytes.insert(bytes.end(), a.begin() + off, a.begin() + off + int64_t(n));
    });
  }
  return bytes;
}

void check_dims(const Design& d, const Geometry& g) {
  if (g.hidden % 16 || g.I % 16 || g.D % 16)
    fail(d, "hidden, intermediate and head_dim must be multiples of 16 (the GEMV kernels' lanes)");
  if (g.weights == DType::I8 && (g.hidden % 32 || g.I % 32 || g.q_dim() % 32))
    fail(d, "int8 weights need hidden, intermediate and heads x head_dim in multiples of 32 (the int8 GEMV's lanes)");
}

Geometry mlp_geometry(const Design& d) {
  Geometry g = geometry(d, false);
  g.hidden = param(d, "hidden"), g.I = param(d, "intermediate");
  g.D = 16;
  return g;
}

HeadGeometry head_geometry(const Design& d) {
  const Geometry g = geometry(d, false);
  HeadGeometry h{g.P, param(d, "vocab"), param(d, "hidden"), 0, 0, 0, g.weights};
  h.R = param(d, "vocab_pad") / h.P;
  h.chunk = param(d, "chunk_rows");
  if (h.chunk <= 0 || h.R % h.chunk != 0 || h.R < ceil_div(h.vocab, h.P))
    fail(d, "chunk_rows does not split the padded vocabulary per core");
  h.objects = h.R / h.chunk;
  return h;
}

}  // namespace sim::fused

// ---- public ---------------------------------------------------------------------------------------

std::vector<float> rope_row(std::span<const float> inv_freq, int64_t position) {
  const size_t half = inv_freq.size();
  std::vector<float> r(2 * half);
  for (size_t i = 0; i < half; ++i) {
    const float a = float(position) * inv_freq[i];
    r[i] = std::cos(a);
    r[half + i] = std::sin(a);
  }
  return r;
}

std::vector<aie::bf16> to_bf16(std::span<const float> x) {
  std::vector<aie::bf16> b(x.size());
  for (size_t i = 0; i < x.size(); ++i) b[i] = aie::to_bf16(x[i], kSimRounding);
  return b;
}

std::vector<float> to_f32(std::span<const aie::bf16> x) {
  std::vector<float> f(x.size());
  for (size_t i = 0; i < x.size(); ++i) f[i] = aie::to_float(x[i]);
  return f;
}

std::vector<aie::bf16> kv_new_row(const Design& d, const HostArgs& args) {
  const std::vector<uint8_t> b = read_drain(d, args, "kv_new");
  std::vector<aie::bf16> row(b.size() / 2);
  std::memcpy(row.data(), b.data(), row.size() * 2);
  return row;
}

void append_kv_new(const Design& d, const HostArgs& args, SimKvCache& kv) {
  const int64_t bits = kv_value_bits(d);
  if (bits == 4) kv.append_int4(read_drain(d, args, "kv_new"));
  else if (bits == 8) kv.append_int8(read_drain(d, args, "kv_new"));
  else kv.append(kv_new_row(d, args));
}

namespace {

void check_args(const Design& d, const HostArgs& args) {
  if (args.size() != d.args.size()) fail(d, "takes " + std::to_string(d.args.size()) + " host arguments");
  for (size_t i = 0; i < args.size(); ++i)
    if (int64_t(args[i].size()) != d.args[i].bytes)
      fail(d, "argument '" + d.args[i].name + "' has " + std::to_string(args[i].size()) + " bytes, expected " +
                  std::to_string(d.args[i].bytes));
}

// What the split assumes of the shape, refused with a message naming the design; the kernels'
// L1 bounds are checked by the interpreter.
void check_shape(const Design& d) {
  if (d.family == "decode_layer" || d.family == "qkv_rope" || d.family == "attention_decode") {
    const Geometry g = geometry(d, true);
    if (d.family == "decode_layer") check_dims(d, g);
    if (d.family == "attention_decode" && param(d, "positions_per_core") != g.ppc())
      fail(d, "positions_per_core does not match the split");
  } else if (d.family == "mlp_fused") {
    check_dims(d, mlp_geometry(d));
  } else if (d.family == "lm_head") {
    const HeadGeometry h = head_geometry(d);
    if (h.hidden % (h.weights == DType::I8 ? 32 : 16))
      fail(d, "hidden must be a multiple of 16 (32 with int8 weights)");
  } else {
    fail(d, "family '" + d.family + "' has no functional model in npu-sim");
  }
}

}  // namespace

void run_design(const Design& d, HostArgs& args, const SimKernelArgs& k, SimStreamCounts* counts) {
  check_args(d, args);
  check_shape(d);
  // The stage computation lives once, in the kernel sources: every core's program runs them.
  run_design_programs(d, args, k, counts);
}

std::shared_ptr<const CorePrograms> prepare_design(const Design& d, const SimKernelArgs& k) {
  check_shape(d);
  return std::make_shared<const CorePrograms>(design_programs(d, k));
}

void run_design(const CorePrograms& prepared, HostArgs& args, SimStreamCounts* counts) {
  check_args(prepared.design(), args);
  run_design_programs(prepared, args, counts);
}

std::vector<aie::bf16> arg_bf16(const Design& d, const HostArgs& args, const std::string& name, int64_t n) {
  const std::vector<uint8_t>& a = args.at(size_t(arg_index(d, name)));
  if (int64_t(a.size()) < 2 * n) fail(d, "argument '" + name + "' holds fewer than " + std::to_string(n) + " bf16");
  std::vector<aie::bf16> v(static_cast<size_t>(n));
  std::memcpy(v.data(), a.data(), size_t(n) * 2);
  return v;
}

std::vector<float> arg_f32(const Design& d, const HostArgs& args, const std::string& name, int64_t n) {
  const std::vector<uint8_t>& a = args.at(size_t(arg_index(d, name)));
  if (int64_t(a.size()) < 4 * n) fail(d, "argument '" + name + "' holds fewer than " + std::to_string(n) + " f32");
  std::vector<float> v(static_cast<size_t>(n));
  std::memcpy(v.data(), a.data(), size_t(n) * 4);
  return v;
}

std::vector<float> lm_head_logits(const Design& d, const HostArgs& args) {
  const HeadGeometry h = head_geometry(d);
  std::vector<float> logits(static_cast<size_t>(h.P * h.R));
  for (int64_t c = 0; c < h.P / kCores; ++c) {
    const std::vector<uint8_t> col = read_drain(d, args, "out_c" + std::to_string(c) + "_l2l3");
    if (int64_t(col.size()) != h.objects * kCores * h.chunk * 4) fail(d, "LM-head drain of unexpected size");
    for (int64_t o = 0; o < h.objects; ++o)
      for (int r = 0; r < kCores; ++r)
        std::memcpy(logits.data() + (c * kCores + r) * h.R + o * h.chunk,
                    col.data() + ((o * kCores + r) * h.chunk) * 4, size_t(h.chunk) * 4);
  }
  logits.resize(size_t(h.vocab));
  return logits;
}

// ---- two routes through one layer ----------------------------------------------------------------

SimLayerResult fused_decode_layer(const DecodeLayerShape& shape, const SimLayerWeights& w,
                                  std::span<const aie::bf16> x, std::span<const float> rope, SimKvCache& kv,
                                  const SimKernelArgs& k, int columns) {
  DecodeLayerShape s = shape;
  s.context = kv.length + 1;
  s.capacity = kv.max_len;
  s.kv_int8 = kv.int8 && !kv.int4;
  s.kv_int4 = kv.int4;
  const Design d = decode_layer_design(kv.int8 ? DType::I8 : DType::BF16, s, columns);
  HostArgs a = pack_decode_layer(d, w, x, rope, kv);
  run_design(d, a, k);
  append_kv_new(d, a, kv);
  return {arg_bf16(d, a, "result", s.hidden), {d.name}};
}

namespace {

Tensor row_tensor(std::span<const aie::bf16> v) { return Tensor::from_vector({1, int64_t(v.size())}, to_f32(v)); }

std::vector<aie::bf16> tensor_bf16(const Tensor& t) {
  const std::vector<float> f = t.to_vector();
  std::vector<aie::bf16> b(f.size());
  for (size_t i = 0; i < f.size(); ++i) b[i] = {f32_to_bf16(f[i])};  // exact: npu-sim stores bf16 values
  return b;
}

}  // namespace

SimLayerResult op_by_op_decode_layer(NpuSimBackend& sim, const DecodeLayerShape& shape, const SimLayerWeights& w,
                                     std::span<const aie::bf16> x, std::span<const float> rope, SimKvCache& kv,
                                     const SimKernelArgs& k, int columns) {
  DecodeLayerShape s = shape;
  s.context = kv.length + 1;
  if (s.window > 0) s.context = std::min(s.context, s.window);  // attention_decode reads the last context rows
  SimLayerResult r;
  const Design dq = qkv_rope_design(DType::BF16, s, columns);
  HostArgs aq = pack_qkv_rope(dq, w, x, rope);
  run_design(dq, aq, k);
  const std::vector<aie::bf16> q = arg_bf16(dq, aq, "result", s.heads * s.head_dim);
  kv.append(arg_bf16(dq, aq, "kv_new", 2 * s.kv_heads * s.head_dim));  // the host places the row
  const Design da = attention_decode_design(s, columns);
  HostArgs aa = pack_attention_decode(da, q, kv);
  run_design(da, aa, k);
  r.designs = {dq.name, da.name};

  // The rest as unfused dispatches of npu-sim, each a Node as the decoder's graph has it.
  const auto run = [&](OpKind op, std::vector<Tensor> in, const std::string& name) {
    Node n;
    n.op = op;
    n.name = name;
    n.attrs.eps = k.eps;
    n.attrs.rms_offset = k.rms_offset;
    if (!sim.supports(n, in)) throw std::logic_error("npu-sim refuses " + name + ": " + sim.refusals().at(std::string(op_name(op))));
    Tensor t = sim.compute(n, in);
    r.designs.push_back(name);
    return t;
  };
  const auto mat = [](const std::vector<float>& m, int64_t rows, int64_t cols) {
    return Tensor::from_vector({rows, cols}, m);
  };
  const int64_t H = s.hidden, I = s.intermediate, Q = s.heads * s.head_dim;
  const Tensor xt = row_tensor(x);
  Tensor o = run(OpKind::MatMul, {row_tensor(arg_bf16(da, aa, "result", Q)), mat(w.o, H, Q)}, "o");
  if (s.post_norms) o = run(OpKind::RMSNorm, {o, Tensor::from_vector({H}, w.post_attn_norm)}, "post_attn_norm");
  const Tensor h1 = run(OpKind::Add, {xt, o}, "attn_residual");
  const Tensor hn = run(OpKind::RMSNorm, {h1, Tensor::from_vector({H}, w.ffn_norm)}, "ffn_norm");
  const Tensor gate = run(OpKind::MatMul, {hn, mat(w.gate, I, H)}, "gate");
  const Tensor up = run(OpKind::MatMul, {hn, mat(w.up, I, H)}, "up");
  const Tensor act = run(s.gelu ? OpKind::GeluTanh : OpKind::Silu, {gate}, "act");
  const Tensor m = run(OpKind::Mul, {act, up}, "gated");
  Tensor dn = run(OpKind::MatMul, {m, mat(w.down, H, I)}, "down");
  if (s.post_norms) dn = run(OpKind::RMSNorm, {dn, Tensor::from_vector({H}, w.post_ffn_norm)}, "post_ffn_norm");
  r.out = tensor_bf16(run(OpKind::Add, {h1, dn}, "ffn_residual"));
  return r;
}

}  // namespace xdna::npu
