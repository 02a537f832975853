#include "npu/sim_exec_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "aie_kernels/kernels.h"

namespace xdna::npu {

namespace {

using aie::bf16;
constexpr int kCores = 4;  // compute rows per column, as the generator uses them

using sim::fail;
using sim::param;
using sim::walk;

void check_arg(const Design& d, const HostArgs& args, size_t i) {
  if (args.size() != d.args.size()) fail(d, "got " + std::to_string(args.size()) + " host arguments, wants 3");
  if (int64_t(args[i].size()) != d.args[i].bytes)
    fail(d, "host argument '" + d.args[i].name + "' has " + std::to_string(args[i].size()) + " bytes, wants " +
                std::to_string(d.args[i].bytes));
}

// The bytes the fills of `fifo` read, concatenated in sequence order.
std::vector<uint8_t> gather(const Design& d, const HostArgs& args, const std::string& fifo) {
  std::vector<uint8_t> out;
  for (const SeqStep& s : d.sequence) {
    if (s.op != SeqOp::Fill || s.fifo != fifo) continue;
    const std::vector<uint8_t>& a = args.at(size_t(s.arg));
    walk(s.pattern, [&](int64_t off) {
      if (off < 0 || off + s.pattern.elem_bytes > int64_t(a.size())) fail(d, "fill of '" + fifo + "' reads past its argument");
      out.insert(out.end(), a.begin() + off, a.begin() + off + s.pattern.elem_bytes);
    });
  }
  return out;
}

// Writes `stream` through the drains of `fifo`, in sequence order.
void scatter(const Design& d, HostArgs& args, const std::string& fifo, const std::vector<uint8_t>& stream) {
  size_t pos = 0;
  for (const SeqStep& s : d.sequence) {
    if (s.op != SeqOp::Drain || s.fifo != fifo) continue;
    std::vector<uint8_t>& a = args.at(size_t(s.arg));
    walk(s.pattern, [&](int64_t off) {
      if (pos + size_t(s.pattern.elem_bytes) > stream.size()) fail(d, "drain of '" + fifo + "' outruns the output stream");
      std::memcpy(a.data() + off, stream.data() + pos, size_t(s.pattern.elem_bytes));
      pos += size_t(s.pattern.elem_bytes);
    });
  }
  if (pos != stream.size()) fail(d, "drains of '" + fifo + "' do not take the whole output stream");
}

}  // namespace

EncoderAttentionShape encoder_attention_shape(const Design& d) {
  if (d.family != "encoder_attention") fail(d, "is not an encoder_attention design");
  EncoderAttentionShape s;
  s.T = param(d, "T"), s.S = param(d, "S"), s.heads = param(d, "heads"), s.kv_heads = param(d, "kv_heads");
  s.head_dim = param(d, "head_dim"), s.causal = param(d, "causal") != 0, s.window = param(d, "window");
  return s;
}

HostArgs pack_encoder_attention(const Design& d, std::span<const float> q, std::span<const float> k,
                                std::span<const float> v) {
  const EncoderAttentionShape s = encoder_attention_shape(d);
  const int64_t D = s.head_dim, kb = param(d, "kv_block"), blocks = param(d, "S_pad") / kb;
  if (int64_t(q.size()) != s.T * s.heads * D) fail(d, "q has " + std::to_string(q.size()) + " values, wants T x heads x D");
  if (int64_t(k.size()) != s.S * s.kv_heads * D || k.size() != v.size())
    fail(d, "k / v have " + std::to_string(k.size()) + " / " + std::to_string(v.size()) + " values, want S x kv_heads x D");
  HostArgs args;
  for (const HostArg& a : d.args) args.emplace_back(size_t(a.bytes), 0);
  const std::vector<bf16> qb = to_bf16(q), kb16 = to_bf16(k), vb16 = to_bf16(v);
  std::memcpy(args[0].data(), qb.data(), qb.size() * 2);  // [T][heads][D], padded rows stay zero
  bf16* kv = reinterpret_cast<bf16*>(args[1].data());     // [kv_heads][block][K | V][kb][D]
  for (int64_t g = 0; g < s.kv_heads; ++g)
    for (int64_t j = 0; j < s.S; ++j) {
      bf16* blk = kv + ((g * blocks + j / kb) * 2 * kb) * D;
      std::memcpy(blk + (j % kb) * D, kb16.data() + (j * s.kv_heads + g) * D, size_t(D) * 2);
      std::memcpy(blk + (kb + j % kb) * D, vb16.data() + (j * s.kv_heads + g) * D, size_t(D) * 2);
    }
  return args;
}

void run_encoder_attention(const Design& d, HostArgs& args, float scale) {
  const EncoderAttentionShape s = encoder_attention_shape(d);
  for (size_t i = 0; i < 3; ++i) check_arg(d, args, i);
  const int64_t D = s.head_dim, tq = param(d, "q_tile"), kb = param(d, "kv_block");
  const int columns = int(param(d, "columns"));
  if (scale == 0.0f) scale = 1.0f / std::sqrt(float(D));
  int32_t scale_bits;
  std::memcpy(&scale_bits, &scale, sizeof scale);
  const int64_t q_obj = kCores * tq * D * 2, kv_obj = 2 * kb * D * 2;
  for (int c = 0; c < columns; ++c) {
    const std::string cs = "_c" + std::to_string(c);
    const std::vector<EncoderAttentionUnit> us = encoder_attention_units(s, tq, kb, columns, c);
    const std::vector<uint8_t> qs = gather(d, args, "q" + cs + "_l3l2");
    const std::vector<uint8_t> kvs = gather(d, args, "kv" + cs + "_l3l2");
    if (int64_t(qs.size()) != int64_t(us.size()) * q_obj) fail(d, "column " + std::to_string(c) + " query stream size");
    std::vector<int64_t> kv_at(us.size() + 1, 0);  // first K/V object of each unit in the stream
    for (size_t i = 0; i < us.size(); ++i) kv_at[i + 1] = kv_at[i] + (us[i].b1 - us[i].b0);
    if (kv_at.back() * kv_obj > int64_t(kvs.size())) fail(d, "column " + std::to_string(c) + " K/V stream is short");
    std::vector<uint8_t> out(qs.size());
    // Each (unit, core) is one core's work on its own L1 buffers: independent of the others.
#pragma omp parallel for schedule(dynamic)
    for (int64_t w = 0; w < int64_t(us.size()) * kCores; ++w) {
      const EncoderAttentionUnit& u = us[size_t(w / kCores)];
      const int64_t r = w % kCores, off = (w / kCores) * q_obj + r * tq * D * 2;
      std::vector<float> m(static_cast<size_t>(tq)), l(static_cast<size_t>(tq)), o(static_cast<size_t>(tq * D)),
          scores(static_cast<size_t>(kb));
      const bf16* qt = reinterpret_cast<const bf16*>(qs.data() + off);
      // The cores also run the padding rows (>= T); their outputs land in the padded rows of
      // `out`, which are dropped, so the simulator skips them (they stay zero here).
      const int64_t rows = std::clamp<int64_t>(s.T - (u.q0 + r * tq), 0, tq);
      if (rows == 0) continue;
      attention_encoder_bf16_init(m.data(), l.data(), o.data(), int32_t(rows), int32_t(D));
      for (int64_t b = u.b0; b < u.b1; ++b) {
        const bf16* blk = reinterpret_cast<const bf16*>(kvs.data() + (kv_at[size_t(w / kCores)] + b - u.b0) * kv_obj);
        attention_encoder_bf16(qt, blk, m.data(), l.data(), o.data(), scores.data(), int32_t(rows), int32_t(kb),
                               int32_t(D), int32_t(u.q0 + r * tq), int32_t(b * kb), int32_t(s.S), s.causal ? 1 : 0,
                               int32_t(s.window), scale_bits);
      }
      attention_encoder_bf16_finish(l.data(), o.data(), reinterpret_cast<bf16*>(out.data() + off), int32_t(rows),
                                    int32_t(D));
    }
    scatter(d, args, "out" + cs + "_l2l3", out);
  }
}

std::vector<float> encoder_attention_output(const Design& d, const HostArgs& args) {
  const EncoderAttentionShape s = encoder_attention_shape(d);
  check_arg(d, args, 2);
  const int64_t n = s.T * s.heads * s.head_dim;
  const bf16* p = reinterpret_cast<const bf16*>(args[2].data());
  return to_f32(std::span<const bf16>(p, size_t(n)));
}

std::vector<float> sim_encoder_attention(const Design& d, std::span<const float> q, std::span<const float> k,
                                         std::span<const float> v, float scale) {
  HostArgs args = pack_encoder_attention(d, q, k, v);
  run_encoder_attention(d, args, scale);
  return encoder_attention_output(d, args);
}

}  // namespace xdna::npu
