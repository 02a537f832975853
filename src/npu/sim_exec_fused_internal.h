// What npu-sim's fused-design executor (sim_exec.cpp) and its packer (sim_exec_pack.cpp) share:
// the fused topology's constants and the split of the layer over the cores.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "npu/sim_exec.h"

namespace xdna::npu::sim::fused {

// The fused topology's constants (design_families_fused_internal.h): 2 KiB DDR-stream objects
// per core, 4 compute rows per column.
inline constexpr int64_t kObj = 2048;
inline constexpr int kCores = 4;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
inline int64_t obj_pad(int64_t bytes) { return ceil_div(bytes, kObj) * kObj; }

// The index of the host argument `name`; throws naming the design when it has none.
int arg_index(const Design& d, const std::string& name);

// The split the generators use (design_families_fused.cpp, Stages): P cores in (column, row)
// order, ceil(n / P) rows each; attention by (KV head, block of positions).
struct Geometry {
  int64_t P = 0, hidden = 0, heads = 0, kv_heads = 0, D = 0, I = 0, context = 1;
  bool qk_norm = false, post_norms = false;
  DType weights = DType::BF16;  // the cores' kernel dtype: bf16 or i8
  int64_t q_dim() const { return heads * D; }
  int64_t kv_dim() const { return kv_heads * D; }
  int64_t n_qkv() const { return q_dim() + 2 * kv_dim(); }
  int64_t rows(int64_t n) const { return ceil_div(n, P); }
  int64_t kv_per_core() const { return ceil_div(kv_heads, P); }
  int64_t cores_per_kv() const { return std::max<int64_t>(1, P / kv_heads); }
  int64_t ppc() const { return ceil_div(context, cores_per_kv()); }
  int64_t kv_bytes() const { return kv_per_core() * 2 * ppc() * D * 2; }
  // KV heads [h0, h1) and positions [t0, t1) of core p.
  void attn_range(int64_t p, int64_t& h0, int64_t& h1, int64_t& t0, int64_t& t1) const {
    if (kv_per_core() > 1) {
      h0 = std::min(kv_heads, p * kv_per_core()), h1 = std::min(kv_heads, h0 + kv_per_core());
      t0 = 0, t1 = context;
    } else {
      h0 = p / cores_per_kv(), h1 = std::min(kv_heads, h0 + 1);
      const int64_t b = p % cores_per_kv();
      t0 = std::min(context, b * ppc()), t1 = std::min(context, t0 + ppc());
    }
  }
};

// The cores of `d` (its kernel tiles, whole columns of 4, bf16 or int8), and with `layer` the
// layer's shape from the design's parameters; throws naming the design otherwise.
Geometry geometry(const Design& d, bool layer);
// mlp_fused's geometry: the cores, hidden and intermediate.
Geometry mlp_geometry(const Design& d);
// Refuses hidden, intermediate and head_dim the GEMV kernels' lanes do not take.
void check_dims(const Design& d, const Geometry& g);

// LM head: logits of core p, object o at rows p * R + o * chunk; each column joins [object][core].
struct HeadGeometry {
  int64_t P, vocab, hidden, R, chunk, objects;
  DType weights;
};
HeadGeometry head_geometry(const Design& d);

// The DDR fill FIFO of column c.
std::string ddr_fifo(int c);
// What the drain steps of `fifo` wrote, in transfer order.
std::vector<uint8_t> read_drain(const Design& d, const HostArgs& args, const std::string& fifo);

}  // namespace xdna::npu::sim::fused
