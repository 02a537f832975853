// npu-sim's functional execution of the encoder attention design (design_families.h, "Encoder
// attention"): the host arguments are packed in the design's DDR layouts, each column's query and
// K/V streams are gathered through its runtime sequence's fill access patterns, every core runs
// the kernel source aie_kernels/attention_encoder_bf16.cc on its query tile block by block (the
// schedule of encoder_attention_units), and the memtile join's output objects leave through the
// drain patterns (padding query rows, whose outputs are dropped, are not computed). The cost
// model prices the same design; this file computes, it does not time.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "npu/design.h"
#include "npu/design_families.h"
#include "npu/sim_exec.h"

namespace xdna::npu {

// The shape an encoder_attention design was generated for (from its params).
EncoderAttentionShape encoder_attention_shape(const Design& d);

// q [T, heads, D], k and v [S, kv_heads, D] f32, rounded to bf16 nearest-even: the args q, kv, out.
HostArgs pack_encoder_attention(const Design& d, std::span<const float> q, std::span<const float> k,
                                std::span<const float> v);

// Runs one invocation; scale 0 means 1 / sqrt(head_dim). Throws std::invalid_argument naming the
// design and what does not match (family, argument sizes).
void run_encoder_attention(const Design& d, HostArgs& args, float scale = 0.0f);

// The drained output [T, heads, D] as f32 values (padded rows dropped).
std::vector<float> encoder_attention_output(const Design& d, const HostArgs& args);

// All three: q, k, v f32 in, [T, heads, D] f32 out.
std::vector<float> sim_encoder_attention(const Design& d, std::span<const float> q, std::span<const float> k,
                                         std::span<const float> v, float scale = 0.0f);

}  // namespace xdna::npu
