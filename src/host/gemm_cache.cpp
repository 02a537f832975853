// Packed-weight cache: the GEMM re-packs its weight panels on every call, which at small M costs
// as much as the arithmetic. Read-only (mapped) weights cannot change, so their packed panels are
// kept, keyed by where the weights live and what they are. Writable (heap) tensors are never
// cached: they may be rewritten in place, and activations are heap tensors.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

#include "core/cpu.h"
#include "core/ggml_blocks.h"
#include "core/parallel.h"
#include "host/gemm.h"

namespace xdna::host {
namespace {

struct Key {
  const Buffer* buffer;
  size_t offset;
  DType dtype;
  int64_t rows, cols, row_bytes;
  const float* scales;
  bool bf16;
  int nr;  // the ISA's panel width
  auto tie() const { return std::tie(buffer, offset, dtype, rows, cols, row_bytes, scales, bf16, nr); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Entry {
  // Held so that neither address can be freed and reused by another tensor while cached.
  std::shared_ptr<Buffer> weights, scales;
  std::shared_ptr<const PackedWeights> packed;
  int pins = 0;  // pin_packed_weights handles alive: kept past the bound, not counted in `bytes`
};

struct Cache {
  std::mutex mu;
  std::map<Key, Entry> entries;
  size_t bytes = 0;
  size_t ggml_bytes = 0;  // the part holding GGML-format weights
  size_t pinned_bytes = 0;
};

Cache& cache() {
  static Cache c;
  return c;
}

size_t cache_limit() {
  static const size_t limit = [] {
    const char* env = std::getenv("XDNA_PACK_CACHE_MB");
    const long long mb = env ? std::atoll(env) : 1024;
    return static_cast<size_t>(mb > 0 ? mb : 0) << 20;
  }();
  return limit;
}

size_t ggml_cache_limit() {
  static const size_t limit = [] {
    const char* env = std::getenv("XDNA_PACK_CACHE_GGML_MB");
    const long long mb = env ? std::atoll(env) : 32;
    return static_cast<size_t>(mb > 0 ? mb : 0) << 20;
  }();
  return limit;
}

// A pin_packed_weights handle: its release unpins, and the last one drops the entry (unless a
// clear dropped it already).
struct Pin {
  Key key;
  explicit Pin(const Key& k) : key(k) {}
  Pin(const Pin&) = delete;
  Pin& operator=(const Pin&) = delete;
  ~Pin() {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.entries.find(key);
    if (it == c.entries.end() || it->second.pins == 0) return;
    if (--it->second.pins == 0) {
      c.pinned_bytes -= it->second.packed->bytes();
      c.entries.erase(it);
    }
  }
};

// The cache key of constant weights; false for weights that may change (writable buffers).
bool cache_key(const Tensor& w, const WeightRows& wr, Key& key) {
  const auto& buf = w.buffer();
  if (!buf || buf->writable()) return false;
  const auto& sc = w.scales();
  if (sc && sc->defined() && sc->buffer()->writable()) return false;
  const IsaKernels& kern = active_kernels();
  const bool bf16 = wr.dtype == DType::BF16 && kern.bf16gemm != nullptr;
  key = Key{buf.get(), w.byte_offset(), wr.dtype, wr.rows,  wr.cols,
            wr.row_bytes, wr.scales, bf16, use_i8_vnni_gemm(wr) ? -1 : bf16 ? kern.bf16_nr : kern.nr};
  return true;
}

}  // namespace

std::shared_ptr<const PackedWeights> cached_packed_weights(const Tensor& w, const WeightRows& wr) {
  Key key;
  if (!cache_key(w, wr, key)) return nullptr;
  const bool ggml = ggml::is_block_dtype(wr.dtype);
  const auto& buf = w.buffer();
  const auto& sc = w.scales();
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.entries.find(key);
    if (it != c.entries.end()) return it->second.packed;
    const int64_t packed_bytes = (wr.rows + 63) * wr.cols * 4;  // upper bound (NR <= 64)
    if (c.bytes + static_cast<size_t>(packed_bytes) > cache_limit()) return nullptr;
    // GGML block formats (LLM weights) have their own small budget: their f32 packs are 4-7x
    // the file's bytes (Gemma 3 270M: ~400 MB of packs for ~100 MB of layer weights), and
    // packing per call is cheap next to the arithmetic at the row counts that reach the GEMM
    // (prefill; decode runs GEMVs, which never pack).
    if (ggml && c.ggml_bytes + static_cast<size_t>(packed_bytes) > ggml_cache_limit()) return nullptr;
  }
  // Pack outside the lock (it runs threaded); a concurrent caller may pack the same weights too,
  // and the first to insert wins.
  auto packed = pack_weights(wr);
  std::lock_guard<std::mutex> lock(c.mu);
  auto [it, inserted] = c.entries.try_emplace(key, Entry{buf, sc ? sc->buffer() : nullptr, packed});
  if (inserted) {
    c.bytes += packed->bytes();
    if (ggml) c.ggml_bytes += packed->bytes();
  }
  return it->second.packed;
}

std::shared_ptr<void> pin_packed_weights(const Tensor& w, const WeightRows& wr) {
  Key key;
  if (!cache_key(w, wr, key)) return nullptr;
  Cache& c = cache();
  std::shared_ptr<const PackedWeights> packed;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.entries.find(key);
    if (it != c.entries.end()) packed = it->second.packed;
  }
  if (!packed) packed = pack_weights(wr);  // outside the lock, as above
  {
    std::lock_guard<std::mutex> lock(c.mu);
    const auto& sc = w.scales();
    auto [it, inserted] = c.entries.try_emplace(key, Entry{w.buffer(), sc ? sc->buffer() : nullptr, packed});
    Entry& e = it->second;
    const size_t size = e.packed->bytes();
    if (e.pins++ == 0) {
      if (!inserted) {  // was counted against the bound: now it is pinned instead
        c.bytes -= size;
        if (ggml::is_block_dtype(wr.dtype)) c.ggml_bytes -= size;
      }
      c.pinned_bytes += size;
    }
  }
  return std::make_shared<Pin>(key);
}

namespace {

// Drops the process's pages of [p, p + bytes) of a read-only file mapping (whole pages inside
// the range only): they are clean, so a later read just maps them again from the page cache.
void release_mapped(const uint8_t* p, int64_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes)) / page * page;
  if (e > b) ::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);  // advice: failure is harmless
}

std::shared_ptr<const PackedWeights> repack_q6_k(const WeightRows& wr) {
  auto p = std::make_shared<PackedWeights>();
  const int64_t blocks = wr.cols / 256, row_bytes = blocks * 210;
  p->rows = wr.rows;
  p->cols = wr.cols;
  p->storage = std::make_unique<HeapBuffer>(static_cast<size_t>(wr.rows * row_bytes));
  uint8_t* dst = reinterpret_cast<uint8_t*>(p->storage->data());
  parallel_for(wr.rows, 256, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) repack_q6_k_blocks(wr.row(n), dst + n * row_bytes, blocks);
    release_mapped(wr.row(n0), (n1 - n0) * wr.row_bytes);
  });
  return p;
}

}  // namespace

WeightRows q6_k_repacked_rows(const Tensor& w, const WeightRows& wr, std::shared_ptr<const PackedWeights>& hold) {
  if (wr.dtype != DType::Q6_K || wr.q6_k_repacked || !has_avx512_vnni() || !active_kernels().rows_q6_k) return wr;
  // Only where the original's pages can be given back (a file mapping): weights in heap memory
  // (a model's weight arena) would be held twice, and their other readers (an embedding lookup
  // of a tied matrix, the prefill GEMM) need the GGML layout.
  if (!dynamic_cast<const MappedFile*>(w.buffer().get())) return wr;
  Key key;
  if (!cache_key(w, wr, key)) return wr;
  key.nr = -2;  // not a panel width: the repacked rows
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.entries.find(key);
    if (it != c.entries.end()) hold = it->second.packed;
  }
  if (!hold) {
    // Outside the lock (threaded); the first to insert wins. Not counted against the cache's
    // bound: the copy replaces the mapping's resident pages rather than adding to them.
    auto packed = repack_q6_k(wr);
    const auto& sc = w.scales();
    std::lock_guard<std::mutex> lock(c.mu);
    hold = c.entries.try_emplace(key, Entry{w.buffer(), sc ? sc->buffer() : nullptr, packed}).first->second.packed;
  }
  WeightRows r = wr;
  r.data = reinterpret_cast<const uint8_t*>(hold->storage->data());
  r.row_bytes = wr.cols / 256 * 210;
  r.q6_k_repacked = true;
  return r;
}

void clear_packed_weight_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.entries.clear();
  c.bytes = 0;
  c.ggml_bytes = 0;
  c.pinned_bytes = 0;
}

size_t packed_weight_cache_bytes() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.bytes;
}

}  // namespace xdna::host
