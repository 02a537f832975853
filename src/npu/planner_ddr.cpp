// A decode token's DDR traffic itemised (planner.h ddr_items): every fill and drain of the
// designs' runtime sequences, by argument; the fused designs' weight streams split into the
// pieces their generators lay out (design_families_fused.cpp: per core ceil(n / P) rows of each
// matrix, int8 rows followed by f32 scales padded to 32 bytes, the norm gammas, each stream part
// padded to whole 2 KiB objects).
#include <map>
#include <stdexcept>

#include "npu/planner.h"

namespace xdna::npu {

namespace {

constexpr int64_t kCoresPerColumn = 4;  // the fused topology's compute rows (aie2p.md: rows 2-5)

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

int64_t param(const Design& d, const char* name, int64_t fallback = -1) {
  const auto it = d.params.find(name);
  if (it != d.params.end()) return it->second;
  if (fallback >= 0) return fallback;
  throw std::invalid_argument("ddr_items: design '" + d.name + "' has no parameter " + name);
}

DType kernel_dtype(const Design& d) {
  for (const TileUse& t : d.tiles)
    if (t.has_kernel) return t.kernel.dtype;
  throw std::invalid_argument("ddr_items: design '" + d.name + "' has no kernel");
}

// The item names, in report order.
enum Item : int {
  kValues, kPadRows, kScales, kGammas, kObjPad, kKvRead, kKvScales, kKvWrite, kX, kRope, kResult, kLogits,
  kUnfused, kItems
};
const char* const kNames[kItems][2] = {
    {"weight values", "the weights at the chosen precision, what weight_bytes counts"},
    {"weight padding rows", "rows past n when each matrix is split ceil(n / cores) rows a core"},
    {"weight scales", "int8: an f32 scale per row, each core's scales of a matrix padded to 32 bytes"},
    {"norm gammas", "RMSNorm / QK-norm gammas, one copy in every core's stream"},
    {"stream object padding", "each weight stream part padded to whole 2 KiB objects per core"},
    {"kv values read", "the resident cache's K and V blocks, each core's positions padded to whole objects"},
    {"kv scales read", "int8 / int4 cache: f32 K and V scale per position, a core's block padded to whole objects"},
    {"kv row write", "the new token's K / V row and its scales, drained into the cache"},
    {"x (a copy per core)", "the layer input, one 2 KiB object read for every core"},
    {"rope row (a copy per core)", "cos / sin of the position, one object read for every core"},
    {"layer results", "each layer's output vector, bf16, written once"},
    {"logits", "the LM head's f32 logits, padded rows included"},
    {"unfused designs", "every byte of the designs that are not decode_layer or lm_head"},
};

// Bytes of the weight streams that are values, padding rows, scales, and gammas, for `rows_of`
// matrices (n, k) split over P cores (the rest of the stream is object padding).
struct WeightSplit {
  int64_t values = 0, pad_rows = 0, scales = 0;
  void add(DType t, int64_t P, int64_t n, int64_t k) {
    const int64_t rows = ceil_div(n, P);
    values += n * dtype_bytes(t, k);
    pad_rows += (rows * P - n) * dtype_bytes(t, k);
    if (t == DType::I8) scales += P * round_up(rows * 4, 32);
  }
};

}  // namespace

std::vector<DdrItem> ddr_items(std::span<const Design* const> designs) {
  int64_t b[kItems] = {};
  for (const Design* d : designs) {
    if (!d) throw std::invalid_argument("ddr_items: an invocation has no design");
    std::map<std::string, int64_t> by_arg;
    for (const SeqStep& s : d->sequence)
      if (s.op != SeqOp::Wait) by_arg[d->args.at(size_t(s.arg)).name] += s.pattern.bytes();
    auto take = [&](const char* arg) {
      const auto it = by_arg.find(arg);
      const int64_t n = it == by_arg.end() ? 0 : it->second;
      if (it != by_arg.end()) by_arg.erase(it);
      return n;
    };
    const bool layer = d->family == "decode_layer", head = d->family == "lm_head";
    if (!layer && !head) {
      for (const auto& [arg, n] : by_arg) b[kUnfused] += n;
      continue;
    }
    const DType t = kernel_dtype(*d);
    const int64_t P = param(*d, "columns") * kCoresPerColumn, hidden = param(*d, "hidden");
    WeightSplit w;
    int64_t gammas = 0;
    if (layer) {
      const int64_t q = param(*d, "heads") * param(*d, "head_dim"), kv = param(*d, "kv_heads") * param(*d, "head_dim");
      const int64_t inter = param(*d, "intermediate");
      w.add(t, P, q + 2 * kv, hidden);
      w.add(t, P, hidden, q);
      w.add(t, P, inter, hidden);
      w.add(t, P, inter, hidden);
      w.add(t, P, hidden, inter);
      const int64_t norms = param(*d, "post_norms", 0) ? 4 : 2;
      gammas = P * (norms * hidden * 2 + (param(*d, "qk_norm", 0) ? 4 * param(*d, "head_dim") : 0));
    } else {
      const int64_t vocab = param(*d, "vocab"), chunk = param(*d, "chunk_rows");
      const int64_t objects = param(*d, "vocab_pad") / P / chunk;
      w.values = vocab * dtype_bytes(t, hidden);
      w.pad_rows = (param(*d, "vocab_pad") - vocab) * dtype_bytes(t, hidden);
      if (t == DType::I8) w.scales = P * objects * round_up(chunk * 4, 32);
      gammas = P * hidden * 2;
    }
    const int64_t stream = take("weights") + take("weights_rest");
    const int64_t pad = stream - w.values - w.pad_rows - w.scales - gammas;
    if (pad < 0 || pad >= 2 * P * 2048)  // at most a partial object per part and core
      throw std::logic_error("ddr_items: design '" + d->name + "' streams " + std::to_string(stream) +
                             " weight bytes, not its layout's");
    b[kValues] += w.values, b[kPadRows] += w.pad_rows, b[kScales] += w.scales, b[kGammas] += gammas;
    b[kObjPad] += pad;
    b[kKvRead] += take("kv");
    b[kKvScales] += take("kv_scales");
    b[kKvWrite] += take("kv_row") + take("kv_row_scales");
    b[kX] += take("x");
    b[kRope] += take("rope");
    b[kResult] += take("result");
    b[kLogits] += take("out");
    if (!by_arg.empty())
      throw std::logic_error("ddr_items: design '" + d->name + "' moves argument '" + by_arg.begin()->first +
                             "' no item names");
  }
  std::vector<DdrItem> items;
  for (int i = 0; i < kItems; ++i)
    if (b[i] > 0) items.push_back({kNames[i][0], b[i], kNames[i][1]});
  return items;
}

}  // namespace xdna::npu
