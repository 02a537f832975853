#include "models/decoder.h"
#include "models/graph_builder.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/ggml_blocks.h"
#include "host/host_backend.h"
#include "host/ops.h"

namespace xdna {

namespace {

// Prefixes a checkpoint may put in front of the decoder's names (Gemma 3 multimodal exports keep
// the text model under "language_model.").
const char* const kPrefixes[] = {"", "language_model."};

struct LayerWeights {
  Tensor attn_norm, q, k, v, o, bq, bk, bv, q_norm, k_norm, post_attn_norm;
  Tensor ffn_norm, gate, up, down, post_ffn_norm;
  Tensor qkv, gate_up;  // q|k|v and gate|up stacked (Loader::fused); then q, k, v / gate, up are unset
};

}  // namespace

// In f32 exactly as transformers computes them.
Tensor rope_frequencies(const DecoderSpec& s, bool local, const Tensor& divisors) {
  const int64_t half = s.head_dim / 2;
  Tensor f = Tensor::empty({half});
  float* inv = f.data<float>();
  const float theta = local ? s.rope_theta_local : s.rope_theta;
  for (int64_t i = 0; i < half; ++i)
    inv[i] = 1.0f / std::pow(theta, float(2 * i) / float(s.head_dim));
  if (!local && s.rope_scale_factor > 0.0f) {  // llama3: stretch only the low frequencies
    const float factor = s.rope_scale_factor, lo = s.rope_low_freq_factor, hi = s.rope_high_freq_factor;
    const float old_len = static_cast<float>(s.rope_original_max_positions);
    const float low_wavelen = old_len / lo, high_wavelen = old_len / hi;
    for (int64_t i = 0; i < half; ++i) {
      const float wavelen = 2.0f * static_cast<float>(M_PI) / inv[i];
      if (wavelen > low_wavelen) {
        inv[i] = inv[i] / factor;
      } else if (wavelen >= high_wavelen) {
        const float smooth = (old_len / wavelen - lo) / (hi - lo);
        inv[i] = (1.0f - smooth) * inv[i] / factor + smooth * inv[i];
      }
    }
  }
  if (!local && s.rope_linear_factor != 1.0f)
    for (int64_t i = 0; i < half; ++i) inv[i] /= s.rope_linear_factor;
  if (divisors.defined() && !local) {
    const std::vector<float> d = divisors.to_vector();
    for (int64_t i = 0; i < half; ++i) inv[i] /= d[i];
  }
  return f;
}


struct Decoder::Impl {
  std::string prefix;
  Tensor token_embd, output, final_norm;
  Tensor inv_freq_global, inv_freq_local;
  std::vector<LayerWeights> layers;
};

namespace {

// The raw bytes of one tensor, read from its file (not through the mapping, so a tensor copied
// into a fused or repacked buffer or the weight arena leaves no mapped pages behind in the
// resident set).
void read_into(const TensorInfo& info, void* dst) {
  std::ifstream f(info.file, std::ios::binary);
  f.seekg(static_cast<std::streamoff>(info.offset));
  if (!f.read(static_cast<char*>(dst), static_cast<std::streamsize>(info.bytes)))
    throw std::runtime_error(info.file + ": cannot read tensor '" + info.name + "'");
}

std::vector<uint8_t> read_bytes(const TensorInfo& info) {
  std::vector<uint8_t> raw(info.bytes);
  read_into(info, raw.data());
  return raw;
}

}  // namespace

// GGML q5_0 (f16 d; u8 qh[4]; u8 qs[16]: value = d * (5-bit q - 16)) is an engine dtype and is
// loaded as the file has it. Every value is d times an integer in [-16, 15], so it is also exactly
// a q8_0 block (f16 d; int8 q[32]) with the same d: when q5_0 matrices are stacked with q8_0 ones
// (Gemma 3 270M Q4_K_M: q, k in q5_0, v in q8_0), the stack is q8_0 and the q5_0 parts are widened
// (lossless, 34 instead of 22 bytes a block) so the step keeps one GEMV for q|k|v.
static constexpr int64_t kQ5Bytes = 22, kQ8Bytes = 34;

static int64_t q5_0_blocks(const TensorInfo& info) {
  const int64_t blocks = static_cast<int64_t>(info.bytes) / kQ5Bytes;
  if (info.shape.size() != 2 || blocks * kQ5Bytes != static_cast<int64_t>(info.bytes) ||
      blocks * 32 != shape_numel(info.shape))
    throw std::runtime_error(info.file + ": q5_0 tensor '" + info.name + "' has an inconsistent size");
  return blocks;
}

static void q5_0_to_q8_0(const uint8_t* src, int64_t blocks, uint8_t* dst) {
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* in = src + b * kQ5Bytes;
    uint8_t* o = dst + b * kQ8Bytes;
    std::memcpy(o, in, 2);  // d
    uint32_t qh;
    std::memcpy(&qh, in + 2, 4);
    const uint8_t* qs = in + 6;
    int8_t* q = reinterpret_cast<int8_t*>(o + 2);
    for (int j = 0; j < 16; ++j) {
      q[j] = static_cast<int8_t>(((qs[j] & 0x0F) | (((qh >> j) & 1u) << 4)) - 16);
      q[j + 16] = static_cast<int8_t>(((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16);
    }
  }
}

std::optional<DType> ggml_block_dtype(const TensorInfo& info) {
  if (!info.dtype || !ggml::is_block_dtype(*info.dtype)) return std::nullopt;
  return info.dtype;
}

Tensor load_decoder_weight(const WeightSource& src, const TensorInfo& info) { return src.get(info.name); }

namespace {

// The model's GGML block matrices, copied into one buffer backed by transparent huge pages
// (HeapBuffer advises them from 8 MiB up). A decode step streams every matrix once; held as
// separate allocations of a few MiB, or in the file mapping, they sit on 4 KiB pages, and every
// page costs a TLB miss (a nested page walk in a VM): 13% more CPU time for the same Q8_0 GEMVs
// over 28 layers of Qwen3-0.6B shapes, measured here. Sealed read-only once filled, like the
// mapping it replaces (the GEMM pack cache treats such weights as constants).
class WeightArena final : public Buffer {
 public:
  explicit WeightArena(size_t bytes) : heap_(bytes) {}
  std::byte* data() override { return heap_.data(); }
  size_t size() const override { return heap_.size(); }
  bool writable() const override { return !sealed_; }
  void seal() { sealed_ = true; }

 private:
  HeapBuffer heap_;
  bool sealed_ = false;
};

// Room for one matrix: whole cache lines, so every matrix starts 64-byte aligned.
int64_t arena_room(int64_t bytes) { return (bytes + 63) / 64 * 64; }

class Loader {
 public:
  Loader(const WeightSource& src, std::string prefix) : src_(src), prefix_(std::move(prefix)) {}

  // Bytes `matrix` would take in the arena: GGML block weights only, else 0 (they stay where
  // the source keeps them).
  int64_t arena_bytes(const std::string& name) const {
    if (!has(name)) return 0;
    const TensorInfo& info = src_.info(prefix_ + name);
    const auto d = ggml_block_dtype(info);
    return d ? arena_room(dtype_bytes(*d, shape_numel(info.shape))) : 0;
  }
  int64_t arena_bytes(const std::vector<std::string>& names, const std::vector<Shape>& shapes) const {
    const auto dt = fused_dtype(names, shapes);
    if (!dt) return 0;
    int64_t rows = 0;
    for (const auto& s : shapes) rows += s[0];
    return arena_room(dtype_bytes(*dt, rows * shapes[0][1]));
  }
  // From here on get() and fused() place GGML block matrices in `arena` (sized by arena_bytes).
  void use_arena(std::shared_ptr<WeightArena> arena) { arena_ = std::move(arena), used_ = 0; }

  // A weight matrix: in the arena when there is one and it is a GGML block type.
  Tensor matrix(const std::string& name, const Shape& expect) const {
    if (!arena_ || !arena_bytes(name)) return get(name, expect);
    const std::string full = prefix_ + name;
    const TensorInfo& info = src_.info(full);
    if (info.shape != expect)
      throw std::runtime_error(src_.path() + ": tensor '" + full + "' has shape " +
                               shape_str(info.shape) + ", expected " + shape_str(expect));
    const DType dt = *ggml_block_dtype(info);
    Tensor t = take(expect, dt);
    if (static_cast<int64_t>(info.bytes) != t.nbytes())
      throw std::runtime_error(src_.path() + ": tensor '" + full + "' has an inconsistent size");
    read_into(info, t.raw());
    return t;
  }

  bool has(const std::string& name) const { return !name.empty() && src_.contains(prefix_ + name); }

  Tensor get(const std::string& name, const Shape& expect) const {
    const std::string full = prefix_ + name;
    if (!src_.contains(full))
      throw std::runtime_error(src_.path() + ": missing tensor '" + full + "'");
    const TensorInfo& info = src_.info(full);
    Tensor t = load_decoder_weight(src_, info);
    if (t.shape() != expect)
      throw std::runtime_error(src_.path() + ": tensor '" + full + "' has shape " +
                               shape_str(t.shape()) + ", expected " + shape_str(expect));
    return t;
  }
  // Matrices that read the same input (q, k, v; gate, up) stacked into one [Σ rows, cols]
  // tensor, so a decode step runs one GEMV (one parallel region, one quantization of x) instead
  // of several. Only for GGML block weights of one engine dtype, or q5_0 with q8_0 (stacked as
  // q8_0; their GEMM packs have a small cache budget of their own anyway); otherwise (or if any
  // is missing) an undefined tensor: the caller keeps them separate. In the arena when there is one.
  Tensor fused(const std::vector<std::string>& names, const std::vector<Shape>& shapes) const {
    const auto dt = fused_dtype(names, shapes);
    if (!dt) return {};
    int64_t rows = 0;
    for (const auto& s : shapes) rows += s[0];
    Tensor out = arena_ ? take({rows, shapes[0][1]}, *dt) : Tensor::empty({rows, shapes[0][1]}, *dt);
    uint8_t* dst = reinterpret_cast<uint8_t*>(out.raw());
    for (const auto& n : names) {
      const TensorInfo& info = src_.info(prefix_ + n);
      const std::vector<uint8_t> raw = read_bytes(info);
      if (info.dtype != dt) {  // a q5_0 part of a q8_0 stack
        const int64_t blocks = q5_0_blocks(info);
        q5_0_to_q8_0(raw.data(), blocks, dst);
        dst += blocks * kQ8Bytes;
      } else {
        if (static_cast<int64_t>(raw.size()) != dtype_bytes(*dt, shape_numel(info.shape)))
          throw std::runtime_error(src_.path() + ": tensor '" + prefix_ + n + "' has an inconsistent size");
        std::memcpy(dst, raw.data(), raw.size());
        dst += raw.size();
      }
    }
    return out;
  }
  // Small per-channel parameters (norms, biases) as f32 once, not dequantized every step.
  Tensor param(const std::string& name, int64_t n) const { return host::to_f32(get(name, {n})); }

 private:
  // The engine dtype `names` fuse into, or none when they cannot (see fused()): their common
  // GGML block dtype, or Q8_0 for a mix of Q5_0 and Q8_0.
  std::optional<DType> fused_dtype(const std::vector<std::string>& names, const std::vector<Shape>& shapes) const {
    std::optional<DType> dt;
    const auto q5_q8 = [](DType a, DType b) {
      return (a == DType::Q5_0 && b == DType::Q8_0) || (a == DType::Q8_0 && b == DType::Q5_0);
    };
    for (size_t i = 0; i < names.size(); ++i) {
      if (!has(names[i])) return std::nullopt;
      const TensorInfo& info = src_.info(prefix_ + names[i]);
      const auto d = ggml_block_dtype(info);
      if (!d || info.shape != shapes[i]) return std::nullopt;
      if (!dt || *d == *dt) dt = d;
      else if (q5_q8(*d, *dt)) dt = DType::Q8_0;
      else return std::nullopt;
    }
    return dt;
  }
  // The arena's next `shape` of `dt`.
  Tensor take(const Shape& shape, DType dt) const {
    const int64_t room = arena_room(dtype_bytes(dt, shape_numel(shape)));
    if (used_ + room > static_cast<int64_t>(arena_->size()))
      throw std::logic_error("decoder: weight arena too small");  // arena_bytes and the loads disagree
    Tensor t = Tensor::view(arena_, static_cast<size_t>(used_), shape, dt);
    used_ += room;
    return t;
  }

  const WeightSource& src_;
  std::string prefix_;
  std::shared_ptr<WeightArena> arena_;
  mutable int64_t used_ = 0;
};

}  // namespace

Decoder::Decoder(DecoderSpec spec, std::shared_ptr<const WeightSource> weights)
    : spec_(std::move(spec)), source_(std::move(weights)) {
  if (!source_) throw std::invalid_argument("Decoder: no weights");
  const DecoderSpec& s = spec_;
  const DecoderWeightNames& n = s.names;
  auto impl = std::make_shared<Impl>();
  bool found = false;
  for (const char* p : kPrefixes)
    if (source_->contains(p + n.token_embd)) {
      impl->prefix = p;
      found = true;
      break;
    }
  if (!found)
    throw std::runtime_error(source_->path() + ": missing tensor '" + n.token_embd +
                             "': not a " + s.family + " checkpoint?");
  Loader L(*source_, impl->prefix);
  const int64_t H = s.hidden, I = s.intermediate, D = s.head_dim;
  const int64_t Q = s.heads * D, KV = s.kv_heads * D;
  const auto name = [](const std::string& pattern, int64_t i) { return layer_name(pattern, i); };

  // Size the weight arena: the same choices as the loads below (fused when fusable).
  const bool own_output = !s.tied_embeddings && L.has(n.output);
  int64_t arena = L.arena_bytes(n.token_embd) + (own_output ? L.arena_bytes(n.output) : 0);
  for (int64_t i = 0; i < s.layers; ++i) {
    const std::string q = name(n.q, i), k = name(n.k, i), v = name(n.v, i), gate = name(n.gate, i), up = name(n.up, i);
    const int64_t qkv = s.attn_bias ? 0 : L.arena_bytes({q, k, v}, {{Q, H}, {KV, H}, {KV, H}});
    const int64_t gate_up = L.arena_bytes({gate, up}, {{I, H}, {I, H}});
    arena += (qkv ? qkv : L.arena_bytes(q) + L.arena_bytes(k) + L.arena_bytes(v)) +
             (gate_up ? gate_up : L.arena_bytes(gate) + L.arena_bytes(up)) + L.arena_bytes(name(n.o, i)) +
             L.arena_bytes(name(n.down, i));
  }
  std::shared_ptr<WeightArena> weights_arena;
  if (arena > 0) {
    weights_arena = std::make_shared<WeightArena>(static_cast<size_t>(arena));
    L.use_arena(weights_arena);
  }

  impl->token_embd = L.matrix(n.token_embd, {s.vocab_size, H});
  impl->output = own_output ? L.matrix(n.output, {s.vocab_size, H}) : impl->token_embd;
  impl->final_norm = L.param(n.final_norm, H);
  const Tensor divisors = L.has(n.rope_freqs) ? L.param(n.rope_freqs, D / 2) : Tensor();
  impl->inv_freq_global = rope_frequencies(s, false, divisors);
  impl->inv_freq_local = rope_frequencies(s, true, divisors);

  for (int64_t i = 0; i < s.layers; ++i) {
    LayerWeights w;
    w.attn_norm = L.param(name(n.attn_norm, i), H);
    if (!s.attn_bias) w.qkv = L.fused({name(n.q, i), name(n.k, i), name(n.v, i)}, {{Q, H}, {KV, H}, {KV, H}});
    if (!w.qkv.defined()) {
      w.q = L.matrix(name(n.q, i), {Q, H});
      w.k = L.matrix(name(n.k, i), {KV, H});
      w.v = L.matrix(name(n.v, i), {KV, H});
    }
    w.o = L.matrix(name(n.o, i), {H, Q});
    if (s.attn_bias) {
      const auto bias = [&](const std::string& wn, int64_t rows) { return L.param(bias_name(name(wn, i)), rows); };
      w.bq = bias(n.q, Q);
      w.bk = bias(n.k, KV);
      w.bv = bias(n.v, KV);
    }
    if (s.qk_norm) {
      w.q_norm = L.param(name(n.q_norm, i), D);
      w.k_norm = L.param(name(n.k_norm, i), D);
    }
    w.ffn_norm = L.param(name(n.ffn_norm, i), H);
    w.gate_up = L.fused({name(n.gate, i), name(n.up, i)}, {{I, H}, {I, H}});
    if (!w.gate_up.defined()) {
      w.gate = L.matrix(name(n.gate, i), {I, H});
      w.up = L.matrix(name(n.up, i), {I, H});
    }
    w.down = L.matrix(name(n.down, i), {H, I});
    if (s.sandwich_norms) {
      w.post_attn_norm = L.param(name(n.post_attn_norm, i), H);
      w.post_ffn_norm = L.param(name(n.post_ffn_norm, i), H);
    }
    impl->layers.push_back(std::move(w));
  }
  if (weights_arena) weights_arena->seal();
  impl_ = std::move(impl);
}

uint64_t Decoder::kv_cache_bytes(int64_t context_length) const {
  return static_cast<uint64_t>(context_length) * static_cast<uint64_t>(spec_.layers) * 2u *
         static_cast<uint64_t>(dtype_bytes(kv_dtype_, spec_.kv_heads * spec_.head_dim));
}

void Decoder::set_kv_dtype(DType t) {
  host::check_kv_dtype(t, "decoder");
  kv_dtype_ = t;
}

DecoderState Decoder::new_state(int64_t context_length, uint64_t memory_budget_bytes) const {
  if (context_length < 0) throw std::invalid_argument("decoder: negative context length");
  int64_t n = context_length == 0 ? spec_.max_positions : context_length;
  if (memory_budget_bytes > 0) {
    const int64_t fit = static_cast<int64_t>(memory_budget_bytes / kv_cache_bytes(1));
    if (fit < 1)
      throw std::invalid_argument("decoder: a KV cache budget of " + std::to_string(memory_budget_bytes) +
                                  " bytes cannot hold one token (" + std::to_string(kv_cache_bytes(1)) +
                                  " bytes per token)");
    n = std::min(n, fit);
  }
  return DecoderState{host::KvCache(spec_.layers, n, spec_.kv_heads, spec_.head_dim, kv_dtype_), 0, nullptr};
}

// A one-token step's graph, kept in its DecoderState (decoder.h) for the next token. The
// position enters a step only through the attributes set_position writes.
struct DecodeGraph {
  Graph g;
  ValueId ids = -1, logits = -1;
  const void* decoder = nullptr;         // the Decoder::Impl whose weights it holds
  const DecoderState* state = nullptr;   // the state whose KV cache it writes
  const std::byte* kv = nullptr;         // that cache's storage (layer 0 keys)
};

namespace {

// Graph-building helpers: weights enter the graph as constant inputs.
struct Builder : GraphBuilder {
  ValueId rms_norm(ValueId x, const Tensor& w, const DecoderSpec& s, const std::string& name) {
    OpAttrs a;
    a.eps = s.norm_eps;
    a.rms_offset = s.rms_offset;
    return g.add(OpKind::RMSNorm, {x, constant(name + ".w", w)}, a, name);
  }
  // Columns [start, end) of a [T, N] value (a view; the next op makes it contiguous).
  ValueId columns(ValueId x, int64_t start, int64_t end, const std::string& name) {
    return slice(x, 1, start, end, name);
  }
  // x [rows, K] · wᵀ, at most kRowsPerMatmul rows per matmul: the host matmul streams w once for
  // up to 4 rows (its GEMV, every row computed exactly as if alone) and switches to the blocked
  // GEMM past that, whose rows differ from the GEMV's in the last bits. A batched decode step
  // must give each sequence the logits it gets alone, so larger batches run in chunks of 4.
  static constexpr int64_t kRowsPerMatmul = 4;
  ValueId matmul_rows(ValueId x, int64_t rows, const Tensor& w, const Tensor& bias, const std::string& name) {
    if (rows <= kRowsPerMatmul) return matmul(x, w, bias, name);
    std::vector<ValueId> parts;
    for (int64_t r = 0; r < rows; r += kRowsPerMatmul) {
      const std::string part = name + ".rows" + std::to_string(r);
      parts.push_back(matmul(slice(x, 0, r, std::min(rows, r + kRowsPerMatmul), part), w, bias, part + ".mm"));
    }
    OpAttrs cat;
    cat.axis = 0;
    return g.add(OpKind::Concat, parts, cat, name);
  }
};

// The checks forward() and forward_batch() make before running `ids` on `state`: ids in the
// vocabulary, room in the cache, a cache of this model's shape. `what` starts each message.
void check_run(const DecoderSpec& s, const std::vector<int32_t>& ids, const DecoderState& state,
               const std::string& what) {
  const int64_t T = static_cast<int64_t>(ids.size()), pos = state.position;
  for (int32_t id : ids)
    if (id < 0 || id >= s.vocab_size)
      throw std::invalid_argument(what + "token id " + std::to_string(id) + " outside the vocabulary [0, " +
                                  std::to_string(s.vocab_size) + ")");
  if (pos + T > state.context_length())
    throw std::invalid_argument(what + std::to_string(pos) + " cached + " + std::to_string(T) +
                                " new tokens = " + std::to_string(pos + T) +
                                " exceeds the context length of " + std::to_string(state.context_length()));
  if (state.cache.layers() != s.layers || state.cache.key_storage(0).dim(1) != s.kv_heads ||
      state.cache.key_storage(0).dim(2) != s.head_dim)
    throw std::invalid_argument(what + "the state's KV cache was not made for this model");
  if (pos < 0 || pos > state.cache.length(0))
    throw std::invalid_argument(what + "state position " + std::to_string(pos) + " is past the " +
                                std::to_string(state.cache.length(0)) + " cached tokens");
}

// Binds a one-sequence graph's position (the tokens already cached): where RoPE starts, where
// the new K/V rows go, and where the queries sit among the keys.
void set_position(Graph& g, int64_t position) {
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const OpKind op = g.nodes()[i].op;
    if (op == OpKind::Rope) g.attrs(i).position = position;
    else if (op == OpKind::KvWrite) g.attrs(i).start = position;
    else if (op == OpKind::Attention) g.attrs(i).q_offset = position;
  }
}

// cap * tanh(logits / cap) in place; the op set has no tanh.
void softcap_logits(Tensor& logits, float cap) {
  float* p = logits.data<float>();
  for (int64_t j = 0; j < logits.numel(); ++j) p[j] = cap * std::tanh(p[j] / cap);
}

}  // namespace

DecoderStep Decoder::forward(const std::vector<int32_t>& ids, DecoderState& state, bool all_logits,
                             std::vector<Backend*> backends) const {
  if (ids.empty()) throw std::invalid_argument("decoder: no tokens to run");
  check_run(spec_, ids, state, "decoder: ");
  return step(ids, {static_cast<int64_t>(ids.size())}, {&state}, all_logits, std::move(backends));
}

DecoderStep Decoder::forward_batch(const std::vector<int32_t>& ids, const std::vector<DecoderState*>& states,
                                   std::vector<Backend*> backends) const {
  const int64_t B = static_cast<int64_t>(ids.size());
  if (B == 0) throw std::invalid_argument("decoder: no sequences to run");
  if (states.size() != ids.size())
    throw std::invalid_argument("decoder: " + std::to_string(B) + " token ids for " + std::to_string(states.size()) +
                                " sequence states (one id per sequence)");
  for (int64_t i = 0; i < B; ++i) {
    const std::string what = "decoder: sequence " + std::to_string(i) + ": ";
    if (!states[i]) throw std::invalid_argument(what + "no state");
    for (int64_t j = 0; j < i; ++j)
      if (states[j] == states[i])
        throw std::invalid_argument(what + "the same state as sequence " + std::to_string(j) +
                                    " (a sequence runs once per step)");
    check_run(spec_, {ids[i]}, *states[i], what);
  }
  return step(ids, std::vector<int64_t>(B, 1), states, /*all_logits=*/true, std::move(backends));
}

// One step of `states.size()` sequences: sequence j runs the next rows[j] of `ids` at its own
// position on its own KV cache. Row-wise work (norms, projections, MLP, head) runs over all rows at
// once; RoPE, the cache write and attention run per sequence. With several sequences every matmul
// goes through matmul_rows, whose rows are bit-identical to a one-row run (a batched sequence gets
// exactly the logits it gets alone); one sequence (prefill, a lone decode) takes the plain matmul.
std::shared_ptr<DecodeGraph> Decoder::build_step(const std::vector<int32_t>& ids, const std::vector<int64_t>& rows,
                                                 const std::vector<DecoderState*>& states, bool all_logits) const {
  const DecoderSpec& s = spec_;
  const Impl& w = *impl_;
  const int64_t N = static_cast<int64_t>(ids.size());
  const int64_t D = s.head_dim, Hq = s.heads, Hkv = s.kv_heads;
  const bool one = states.size() == 1;

  Builder b;
  Graph& g = b.g;
  const auto mm = [&](ValueId a, const Tensor& weight, const Tensor& bias, const std::string& name) {
    return one ? b.matmul(a, weight, bias, name) : b.matmul_rows(a, N, weight, bias, name);
  };
  const ValueId ids_in = g.input("ids", i32_tensor(ids));
  ValueId x = g.add(OpKind::Embedding, {b.constant("token_embd", w.token_embd), ids_in}, {}, "embed");
  if (s.embed_scale != 1.0f) {
    OpAttrs a;
    a.scale = s.embed_scale;
    x = g.add(OpKind::Scale, {x}, a, "embed.scale");
  }
  const ValueId freq_global = b.constant("rope.inv_freq", w.inv_freq_global);
  const ValueId freq_local = b.constant("rope.inv_freq_local", w.inv_freq_local);
  OpAttrs rows_cat;
  rows_cat.axis = 0;

  for (int64_t i = 0; i < s.layers; ++i) {
    const LayerWeights& lw = w.layers[i];
    const std::string L = "L" + std::to_string(i) + ".";
    const bool local = s.is_local(i);

    ValueId h = b.rms_norm(x, lw.attn_norm, s, L + "attn_norm");
    ValueId q, k, v;
    if (lw.qkv.defined()) {
      const ValueId qkv = mm(h, lw.qkv, {}, L + "qkv");
      q = b.columns(qkv, 0, Hq * D, L + "q");
      k = b.columns(qkv, Hq * D, (Hq + Hkv) * D, L + "k");
      v = b.columns(qkv, (Hq + Hkv) * D, (Hq + 2 * Hkv) * D, L + "v");
    } else {
      q = mm(h, lw.q, lw.bq, L + "q");
      k = mm(h, lw.k, lw.bk, L + "k");
      v = mm(h, lw.v, lw.bv, L + "v");
    }
    q = b.reshape(q, {N, Hq, D}, L + "q.heads");
    k = b.reshape(k, {N, Hkv, D}, L + "k.heads");
    v = b.reshape(v, {N, Hkv, D}, L + "v.heads");
    if (s.qk_norm) {
      q = b.rms_norm(q, lw.q_norm, s, L + "q_norm");
      k = b.rms_norm(k, lw.k_norm, s, L + "k_norm");
    }
    const ValueId freqs = local ? freq_local : freq_global;
    std::vector<ValueId> outs;
    int64_t first = 0;  // the sequence's first row
    for (size_t j = 0; j < states.size(); ++j) {
      DecoderState& st = *states[j];
      const int64_t T = rows[j];
      const std::string S = one ? L : L + "s" + std::to_string(j) + ".";
      const auto own = [&](ValueId src, const char* what) {
        return one ? src : b.slice(src, 0, first, first + T, S + what);
      };
      OpAttrs rope;
      rope.rope_layout = s.rope_layout == 0 ? RopeLayout::Interleaved : RopeLayout::HalfSplit;
      rope.position = st.position;
      const ValueId qr = g.add(OpKind::Rope, {own(q, "q"), freqs}, rope, S + "q.rope");
      const ValueId kr = g.add(OpKind::Rope, {own(k, "k"), freqs}, rope, S + "k.rope");
      // The new K/V go into the preallocated cache in place; attention reads the filled prefix.
      OpAttrs kw;
      kw.start = st.position;
      const ValueId keys = g.add(OpKind::KvWrite, {b.constant(S + "cache.k", st.cache.key_storage(i)), kr}, kw,
                                 S + "cache.k.write");
      const ValueId values = g.add(OpKind::KvWrite, {b.constant(S + "cache.v", st.cache.value_storage(i)), own(v, "v")},
                                   kw, S + "cache.v.write");
      OpAttrs at;
      at.causal = true;
      at.q_offset = st.position;
      at.window = local ? s.sliding_window : 0;
      at.attn_scale = s.attn_scale;
      const ValueId o = g.add(OpKind::Attention, {qr, keys, values}, at, S + "attention");
      outs.push_back(b.reshape(o, {T, Hq * D}, S + "merge_heads"));
      first += T;
    }
    ValueId o = one ? outs[0] : g.add(OpKind::Concat, outs, rows_cat, L + "sequences");
    o = mm(o, lw.o, {}, L + "o");
    if (s.sandwich_norms) o = b.rms_norm(o, lw.post_attn_norm, s, L + "post_attn_norm");
    x = g.add(OpKind::Add, {x, o}, {}, L + "attn_residual");

    h = b.rms_norm(x, lw.ffn_norm, s, L + "ffn_norm");
    ValueId gate, up;
    if (lw.gate_up.defined()) {
      const ValueId gu = mm(h, lw.gate_up, {}, L + "gate_up");
      gate = b.columns(gu, 0, s.intermediate, L + "gate");
      up = b.columns(gu, s.intermediate, 2 * s.intermediate, L + "up");
    } else {
      gate = mm(h, lw.gate, {}, L + "gate");
      up = mm(h, lw.up, {}, L + "up");
    }
    gate = g.add(activation_op(s.act), {gate}, {}, L + "act");
    ValueId m = g.add(OpKind::Mul, {gate, up}, {}, L + "gated");
    m = mm(m, lw.down, {}, L + "down");
    if (s.sandwich_norms) m = b.rms_norm(m, lw.post_ffn_norm, s, L + "post_ffn_norm");
    x = g.add(OpKind::Add, {x, m}, {}, L + "ffn_residual");
  }
  if (one && !all_logits && N > 1) {  // only the last token's logits are wanted: skip the other rows
    OpAttrs a;
    a.axis = 0;
    a.start = N - 1;
    a.end = N;
    x = g.add(OpKind::Slice, {x}, a, "last_row");
  }
  x = b.rms_norm(x, w.final_norm, s, "final_norm");
  const ValueId logits = mm(x, w.output, {}, "output");
  g.mark_output(logits);
  auto built = std::make_shared<DecodeGraph>();
  built->g = std::move(g);
  built->ids = ids_in;
  built->logits = logits;
  return built;
}

DecoderStep Decoder::step(const std::vector<int32_t>& ids, const std::vector<int64_t>& rows,
                          const std::vector<DecoderState*>& states, bool all_logits,
                          std::vector<Backend*> backends) const {
  // One token of one sequence (a decode step) runs the state's kept graph when it was built by
  // this decoder for this state: only the token and the position change from step to step.
  std::shared_ptr<DecodeGraph> graph;
  DecoderState& first = *states[0];
  const bool decode = states.size() == 1 && ids.size() == 1;
  const std::byte* kv = first.cache.key_storage(0).raw();
  if (decode && first.decode_graph && first.decode_graph->decoder == impl_.get() &&
      first.decode_graph->state == &first && first.decode_graph->kv == kv) {
    graph = first.decode_graph;
    graph->g.set(graph->ids, i32_tensor(ids));
    set_position(graph->g, first.position);
  } else {
    graph = build_step(ids, rows, states, all_logits);
    if (decode) {
      graph->decoder = impl_.get();
      graph->state = &first;
      graph->kv = kv;
      first.decode_graph = graph;
    }
  }

  HostBackend host;
  if (backends.empty()) backends.push_back(&host);
  Executor exec(backends);
  DecoderStep out;
  out.report = exec.run(graph->g);
  Tensor& result = graph->g.values()[graph->logits].tensor;
  out.logits = host::to_f32(result);
  result = Tensor();  // a kept graph holds no logits between steps
  if (spec_.final_softcap > 0.0f) softcap_logits(out.logits, spec_.final_softcap);
  for (size_t j = 0; j < states.size(); ++j) {
    states[j]->cache.set_length(states[j]->position + rows[j]);
    states[j]->position += rows[j];
  }
  return out;
}

}  // namespace xdna
