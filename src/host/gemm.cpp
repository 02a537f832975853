// Blocked GEMM driver (the BLIS loop nest): for each NC-wide slab of weight rows and KC-deep slice
// of K, pack the weights into NR-column panels (dequantizing to f32, or as bf16 pairs for the
// vdpbf16ps kernel), pack MC rows of x into MR-row panels, and sweep the microkernel over the
// tiles. Threads split N (or M when M is the larger side) and each runs the whole nest on its
// part. f32 x of moderate size is packed once per call for all threads (gemm_serial_px); otherwise
// each thread packs its own MC x KC blocks of x (gemm_serial).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "core/cpu.h"
#include "core/ggml_blocks.h"
#include "core/parallel.h"
#include "host/gemm.h"

namespace xdna::host {
namespace {

// K slice depth. GGML formats need slices on 256-value block boundaries; all are multiples of 8
// (bfp16). f32 weights take deep slices: every slice after the first re-reads and re-writes the
// whole C block (a 197 x 3072 f32 output is 2.4 MB, past L2), and slices of 768 instead of 192
// measured +8% GFLOP/s on ViT-B/16's GEMMs (197 x {768, 3072} x {768, 3072}, one thread, median
// CPU time; docs/performance.md); the B micro-panel (768 x 32 floats) then streams from L2, which
// keeps up with the FMAs. Other dtypes dequantize or convert per slice: they keep the L1 slice.
constexpr int64_t KC = 256, KC_PLAIN = 192, KC_F32 = 768;
int64_t kc_for(DType t) {
  if (ggml::is_block_dtype(t)) return 256;
  if (t == DType::F32) return KC_F32;
  return KC_PLAIN;
}
constexpr int64_t MC_PANELS = 16;  // MC = MR · 16 rows of x per packed block (stays in L2)
constexpr int64_t NC_PANELS = 64;  // NC = NR · 64 weight rows per packed slab
// Deep f32 slices: fewer rows / weight rows per packed block, so the per-thread A block and the
// per-call B slab keep the bytes they have at KC_PLAIN (the summation order does not change).
int64_t panels_for(int64_t panels, int64_t kc_w) {
  return std::max<int64_t>(1, panels * KC_PLAIN / std::max(kc_w, KC_PLAIN));
}

template <typename T>
T* scratch(std::vector<T>& v, size_t n) {
  if (v.size() < n + 64) v.resize(n + 64);
  // 64-byte align inside the vector (the microkernels use aligned panel loads).
  auto p = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<T*>((p + 63) & ~uintptr_t{63});
}

struct PackBuffers {
  std::vector<float> a, b, rows;
  std::vector<uint32_t> a16, b16;
};
thread_local PackBuffers tls;

// bp[panel][k][c] = w[n0 + panel·NR + c, k0 + k] as f32, zero past the last row.
void pack_b_f32(const IsaKernels& kern, const WeightRows& w, int64_t n0, int64_t nc, int64_t k0,
                int64_t kc, float* bp) {
  const int NR = kern.nr;
  float* rows = scratch(tls.rows, static_cast<size_t>(NR) * kc);
  for (int64_t j = 0; j < nc; j += NR) {
    const int64_t nr = std::min<int64_t>(NR, nc - j);
    const float* src[64];
    for (int64_t c = 0; c < nr; ++c) {
      if (w.dtype == DType::F32) {
        src[c] = reinterpret_cast<const float*>(w.row(n0 + j + c)) + k0;
      } else {
        dequant_range(kern, w, n0 + j + c, k0, kc, rows + c * kc);
        src[c] = rows + c * kc;
      }
    }
    kern.pack_panel(src, nr, NR, kc, bp + j * kc);
  }
}

// ap[panel][k][r] = x[m0 + panel·MR + r, k0 + k], zero past the last row.
void pack_a_f32(int MR, const float* x, int64_t ldx, int64_t m0, int64_t mc, int64_t k0, int64_t kc,
                float* ap) {
  for (int64_t i = 0; i < mc; i += MR) {
    const int64_t mr = std::min<int64_t>(MR, mc - i);
    float* panel = ap + i * kc;
    for (int64_t r = 0; r < mr; ++r) {
      const float* src = x + (m0 + i + r) * ldx + k0;
      for (int64_t k = 0; k < kc; ++k) panel[k * MR + r] = src[k];
    }
    for (int64_t r = mr; r < MR; ++r)
      for (int64_t k = 0; k < kc; ++k) panel[k * MR + r] = 0.f;
  }
}

inline uint32_t bf16_pair(uint16_t lo, uint16_t hi) { return lo | (static_cast<uint32_t>(hi) << 16); }

// bf16 weights are already k-pairs in memory: a panel is a 32-bit transpose of NR rows.
void pack_b_bf16(int NR, const WeightRows& w, int64_t n0, int64_t nc, int64_t k0, int64_t kc,
                 uint32_t* bp) {
  const int64_t kp = (kc + 1) / 2, full = kc / 2;
  for (int64_t j = 0; j < nc; j += NR) {
    const int64_t nr = std::min<int64_t>(NR, nc - j);
    uint32_t* panel = bp + j * kp;
    for (int64_t c = 0; c < NR; ++c) {
      if (c >= nr) {
        for (int64_t p = 0; p < kp; ++p) panel[p * NR + c] = 0;
        continue;
      }
      const uint16_t* src = reinterpret_cast<const uint16_t*>(w.row(n0 + j + c)) + k0;
      for (int64_t p = 0; p < full; ++p) {
        uint32_t v;
        std::memcpy(&v, src + 2 * p, 4);
        panel[p * NR + c] = v;
      }
      if (kp > full) panel[full * NR + c] = bf16_pair(src[2 * full], 0);
    }
  }
}

void pack_a_bf16(const IsaKernels& kern, const float* x, int64_t ldx, int64_t m0, int64_t mc, int64_t k0,
                 int64_t kc, uint32_t* ap) {
  const int MR = kern.bf16_mr;
  const int64_t kp = (kc + 1) / 2;
  uint16_t row[KC + 2];
  for (int64_t i = 0; i < mc; i += MR) {
    const int64_t mr = std::min<int64_t>(MR, mc - i);
    uint32_t* panel = ap + i * kp;
    for (int64_t r = 0; r < MR; ++r) {
      if (r >= mr) {
        for (int64_t p = 0; p < kp; ++p) panel[p * MR + r] = 0;
        continue;
      }
      kern.f32_to_bf16(x + (m0 + i + r) * ldx + k0, row, kc);
      row[kc] = 0;  // odd kc: the last pair's high half
      for (int64_t p = 0; p < kp; ++p) panel[p * MR + r] = bf16_pair(row[2 * p], row[2 * p + 1]);
    }
  }
}

// y[0 : n] += b[0 : n] (plain pointers: see ops.cpp on why loops over captures do not vectorize).
void add_row(float* y, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += b[i];
}

// The bias is added to each C tile right after its last K slice, while the tile is still in L1:
// a separate pass over y afterwards cost ~5% of an encoder's time (a cold read and write of y).
void gemm_serial(const IsaKernels& kern, bool bf16, const float* x, int64_t ldx, const WeightRows& w,
                 const PackedWeights* packed, const float* bias, float* y, int64_t ldy, int64_t m0,
                 int64_t m1, int64_t n0, int64_t n1) {
  const int MR = bf16 ? kern.bf16_mr : kern.mr, NR = bf16 ? kern.bf16_nr : kern.nr;
  const int64_t K = w.cols, KC_W = kc_for(w.dtype);
  const int64_t MC = MR * panels_for(MC_PANELS, KC_W), NC = NR * panels_for(NC_PANELS, KC_W);
  for (int64_t jc = n0; jc < n1; jc += NC) {
    const int64_t nc = std::min(NC, n1 - jc), nc_pad = (nc + NR - 1) / NR * NR;
    for (int64_t pc = 0; pc < K; pc += KC_W) {
      const int64_t kc = std::min(KC_W, K - pc), kp = (kc + 1) / 2;
      const float* tile_bias = pc + kc >= K ? bias : nullptr;  // the last slice adds the bias
      const float* bp = nullptr;
      const uint32_t* bp16 = nullptr;
      if (packed) {
        // Panel jc/NR of the pre-packed weights, at k = pc; panels are K (or ⌈K/2⌉ pairs) deep.
        const int64_t panel = jc / NR;
        if (bf16) bp16 = packed->pairs() + panel * ((K + 1) / 2) * NR + (pc / 2) * NR;
        else bp = packed->f32() + panel * K * NR + pc * NR;
      } else if (bf16) {
        uint32_t* b = scratch(tls.b16, nc_pad * kp);
        pack_b_bf16(NR, w, jc, nc, pc, kc, b);
        bp16 = b;
      } else {
        float* b = scratch(tls.b, nc_pad * kc);
        pack_b_f32(kern, w, jc, nc, pc, kc, b);
        bp = b;
      }
      // Distance between NR-row panels: the KC slice (per-call packing) or all of K (pre-packed).
      const int64_t bstride = packed ? (bf16 ? (K + 1) / 2 : K) : (bf16 ? kp : kc);
      for (int64_t ic = m0; ic < m1; ic += MC) {
        const int64_t mc = std::min(MC, m1 - ic), mc_pad = (mc + MR - 1) / MR * MR;
        if (bf16) {
          uint32_t* ap = scratch(tls.a16, mc_pad * kp);
          pack_a_bf16(kern, x, ldx, ic, mc, pc, kc, ap);
          for (int64_t jr = 0; jr < nc; jr += NR)
            for (int64_t ir = 0; ir < mc; ir += MR) {
              const int64_t mr = std::min<int64_t>(MR, mc - ir), nr = std::min<int64_t>(NR, nc - jr);
              float* c = y + (ic + ir) * ldy + jc + jr;
              kern.bf16gemm(kp, ap + ir * kp, bp16 + jr * bstride, c, ldy, mr, nr, pc > 0);
              if (tile_bias)
                for (int64_t r = 0; r < mr; ++r) add_row(c + r * ldy, tile_bias + jc + jr, nr);
            }
        } else {
          float* ap = scratch(tls.a, mc_pad * kc);
          pack_a_f32(MR, x, ldx, ic, mc, pc, kc, ap);
          for (int64_t jr = 0; jr < nc; jr += NR)
            for (int64_t ir = 0; ir < mc; ir += MR) {
              const int64_t mr = std::min<int64_t>(MR, mc - ir), nr = std::min<int64_t>(NR, nc - jr);
              float* c = y + (ic + ir) * ldy + jc + jr;
              kern.sgemm(kc, ap + ir * kc, bp + jr * bstride, c, ldy, mr, nr, pc > 0);
              if (tile_bias)
                for (int64_t r = 0; r < mr; ++r) add_row(c + r * ldy, tile_bias + jc + jr, nr);
            }
        }
      }
    }
  }
}

// x packed once per call for every thread (f32 path): tile t is an MR-wide panel over all of K
// at t·stride(), holding rows [row0(t), row0(t) + rows(t)). Packing per thread (above)
// made each thread pack all of x when they split N, with a scalar transpose: ~8% of ViT-B/16's
// time on 2 threads. Heights are balanced (M = 197: 14, 14, then 13 x 13) so that no tile is a
// 1-row sliver, whose kernel is latency-bound (2 FMA chains) at a fraction of the FMA rate.
struct PackedX {
  float* data = nullptr;
  int64_t K = 0, MR = 0, tiles = 0, base = 0, extra = 0;
  int64_t stride() const { return (K * MR + 15) / 16 * 16; }  // panels stay 64-byte aligned
  int64_t row0(int64_t t) const { return t * base + std::min(t, extra); }
  int64_t rows(int64_t t) const { return base + (t < extra ? 1 : 0); }
};

PackedX tile_rows(int64_t m, int64_t K, int64_t MR) {
  PackedX px;
  px.K = K, px.MR = MR;
  px.tiles = (m + MR - 1) / MR;
  px.base = m / px.tiles, px.extra = m % px.tiles;
  return px;
}

// Packs tile t of x (all of K) with the ISA's panel transpose.
void pack_x_tile(const IsaKernels& kern, const float* x, int64_t ldx, const PackedX& px, int64_t t) {
  const float* src[64];
  const int64_t r0 = px.row0(t), h = px.rows(t);
  for (int64_t r = 0; r < h; ++r) src[r] = x + (r0 + r) * ldx;
  kern.pack_panel(src, h, px.MR, px.K, px.data + t * px.stride());
}

// Makes tiles [t0, t1) ready inside the GEMM's one parallel region (a separate packing region
// cost a second fork/join per GEMM): a thread packs every tile nobody has claimed yet, then waits
// only for tiles another thread is packing at that moment. A thread that never starts leaves its
// share to the others, so no one waits on it.
void ensure_x_tiles(const IsaKernels& kern, const float* x, int64_t ldx, const PackedX& px,
                    std::atomic<int>* state, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    int expected = 0;  // 0: not packed, 1: being packed, 2: ready
    if (state[t].load(std::memory_order_relaxed) == 0 &&
        state[t].compare_exchange_strong(expected, 1, std::memory_order_acquire)) {
      pack_x_tile(kern, x, ldx, px, t);
      state[t].store(2, std::memory_order_release);
    }
  }
  for (int64_t t = t0; t < t1; ++t)
    for (int spins = 0; state[t].load(std::memory_order_acquire) != 2; ++spins)
      if (spins > 64) std::this_thread::yield();
}

// gemm_serial's loop nest over tiles [t0, t1) of pre-packed x and weight rows [n0, n1).
void gemm_serial_px(const IsaKernels& kern, const PackedX& px, const WeightRows& w,
                    const PackedWeights* packed, const float* bias, float* y, int64_t ldy, int64_t t0,
                    int64_t t1, int64_t n0, int64_t n1) {
  const int NR = kern.nr;
  const int64_t K = w.cols, KC_W = kc_for(w.dtype), NC = NR * panels_for(NC_PANELS, KC_W);
  for (int64_t jc = n0; jc < n1; jc += NC) {
    const int64_t nc = std::min(NC, n1 - jc), nc_pad = (nc + NR - 1) / NR * NR;
    for (int64_t pc = 0; pc < K; pc += KC_W) {
      const int64_t kc = std::min(KC_W, K - pc);
      const float* tile_bias = pc + kc >= K ? bias : nullptr;  // the last slice adds the bias
      const float* bp;
      int64_t bstride;
      if (packed) {
        bp = packed->f32() + (jc / NR) * K * NR + pc * NR;
        bstride = K;
      } else {
        float* b = scratch(tls.b, nc_pad * kc);
        pack_b_f32(kern, w, jc, nc, pc, kc, b);
        bp = b;
        bstride = kc;
      }
      // MC_PANELS tiles of x per block: their KC slices stay in L2 while the B panels stream.
      for (int64_t tc = t0; tc < t1; tc += MC_PANELS) {
        const int64_t tend = std::min(t1, tc + MC_PANELS);
        for (int64_t jr = 0; jr < nc; jr += NR) {
          const int64_t nr = std::min<int64_t>(NR, nc - jr);
          for (int64_t t = tc; t < tend; ++t) {
            const int64_t mr = px.rows(t);
            float* c = y + px.row0(t) * ldy + jc + jr;
            kern.sgemm(kc, px.data + t * px.stride() + pc * px.MR, bp + jr * bstride, c, ldy, mr, nr,
                       pc > 0);
            if (tile_bias)
              for (int64_t r = 0; r < mr; ++r) add_row(c + r * ldy, tile_bias + jc + jr, nr);
          }
        }
      }
    }
  }
}

// x bigger than this (floats) keeps the per-thread MC x KC packing: a whole-K copy would no
// longer sit in the last-level cache.
constexpr int64_t kSharedPackMaxFloats = int64_t{4} << 20;

}  // namespace

bool use_i8_vnni_gemm(const WeightRows& w) {
  return w.dtype == DType::I8 && w.group == w.cols && w.cols < 65536 && active_isa() == Isa::Avx512 &&
         has_avx512_vnni();
}

std::shared_ptr<const PackedWeights> pack_weights(const WeightRows& w) {
  const IsaKernels& kern = active_kernels();
  auto p = std::make_shared<PackedWeights>();
  p->rows = w.rows;
  p->cols = w.cols;
  if (use_i8_vnni_gemm(w)) {
    pack_weights_i8(w, *p);
    return p;
  }
  p->bf16 = w.dtype == DType::BF16 && kern.bf16gemm != nullptr;
  p->rows = w.rows;
  p->cols = w.cols;
  const int64_t NR = p->bf16 ? kern.bf16_nr : kern.nr, K = w.cols;
  p->nr = static_cast<int>(NR);
  const int64_t panels = (w.rows + NR - 1) / NR;
  const int64_t depth = p->bf16 ? (K + 1) / 2 : K;  // 4-byte elements per panel column
  p->storage = std::make_unique<HeapBuffer>(static_cast<size_t>(panels * NR * depth) * 4);
  auto* f32 = reinterpret_cast<float*>(p->storage->data());
  auto* pairs = reinterpret_cast<uint32_t*>(p->storage->data());
  parallel_for(panels, 1, [&](int64_t p0, int64_t p1) {
    const int64_t n0 = p0 * NR, nc = std::min(p1 * NR, w.rows) - n0;
    if (p->bf16) pack_b_bf16(static_cast<int>(NR), w, n0, nc, 0, K, pairs + n0 * depth);
    else pack_b_f32(kern, w, n0, nc, 0, K, f32 + n0 * depth);
  });
  return p;
}

void gemm(const float* x, int64_t ldx, const WeightRows& w, float* y, int64_t ldy, int64_t m,
          const PackedWeights* packed, const float* bias) {
  const IsaKernels& kern = active_kernels();
  const int64_t N = w.rows;
  if (m == 0 || N == 0) return;
  if (w.cols == 0) {
    for (int64_t i = 0; i < m; ++i) {
      std::fill(y + i * ldy, y + i * ldy + N, 0.f);
      if (bias) add_row(y + i * ldy, bias, N);
    }
    return;
  }
  const bool bf16 = w.dtype == DType::BF16 && kern.bf16gemm != nullptr;
  if (packed && packed->i8 && use_i8_vnni_gemm(w) && packed->rows == N && packed->cols == w.cols) {
    gemm_i8_vnni(x, ldx, m, *packed, y, ldy);
    if (bias)
      parallel_for(m, 64, [&](int64_t m0, int64_t m1) {
        for (int64_t i = m0; i < m1; ++i) add_row(y + i * ldy, bias, N);
      });
    return;
  }
  const int64_t MR = bf16 ? kern.bf16_mr : kern.mr, NR = bf16 ? kern.bf16_nr : kern.nr;
  // Packed for another ISA (the test switches) or other weights: pack per call instead.
  if (packed && (packed->i8 || packed->bf16 != bf16 || packed->nr != NR || packed->rows != N || packed->cols != w.cols))
    packed = nullptr;
  if (2 * m * N * w.cols < kGemmSerialFlops) {
    gemm_serial(kern, bf16, x, ldx, w, packed, bias, y, ldy, 0, m, 0, N);
    return;
  }
  if (!bf16 && m > MR && m * w.cols <= kSharedPackMaxFloats) {
    PackedX px = tile_rows(m, w.cols, MR);
    thread_local std::vector<float> xbuf;
    px.data = scratch(xbuf, static_cast<size_t>(px.tiles * px.stride()));
    const std::unique_ptr<std::atomic<int>[]> state(new std::atomic<int>[px.tiles]);
    for (int64_t t = 0; t < px.tiles; ++t) state[t].store(0, std::memory_order_relaxed);
    if ((N + NR - 1) / NR >= px.tiles) {  // every thread reads every tile
      parallel_for(N, NR, [&](int64_t n0, int64_t n1) {
        ensure_x_tiles(kern, x, ldx, px, state.get(), 0, px.tiles);
        gemm_serial_px(kern, px, w, packed, bias, y, ldy, 0, px.tiles, n0, n1);
      });
    } else {  // threads own their tiles
      parallel_for(px.tiles, 1, [&](int64_t t0, int64_t t1) {
        ensure_x_tiles(kern, x, ldx, px, state.get(), t0, t1);
        gemm_serial_px(kern, px, w, packed, bias, y, ldy, t0, t1, 0, N);
      });
    }
    return;
  }
  // Split the side with more tiles; chunks are whole tiles so threads never share one.
  if ((N + NR - 1) / NR >= (m + MR - 1) / MR) {
    parallel_for(N, NR, [&](int64_t n0, int64_t n1) { gemm_serial(kern, bf16, x, ldx, w, packed, bias, y, ldy, 0, m, n0, n1); });
  } else {
    parallel_for(m, MR, [&](int64_t m0, int64_t m1) { gemm_serial(kern, bf16, x, ldx, w, packed, bias, y, ldy, m0, m1, 0, N); });
  }
}

}  // namespace xdna::host
