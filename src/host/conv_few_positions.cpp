// Convolutions with few output positions (ResNet-50's 14x14 and 7x7 stages, and its 3x3 / 2 at
// 56x56): the channel split and the transposed tile (conv_gemm.h).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/cpu.h"
#include "core/parallel.h"
#include "host/conv_gemm.h"
#include "host/scratch_buffer.h"

namespace xdna::host {
namespace {

// What both drivers below derive from their arguments: sizes, the kernels, each group's geometry.
struct Driver {
  const Tensor& x;
  const ConvParams& p;
  int64_t Kh, Kw, Ho, Wo;
  const PackedConvWeights& packed;
  int64_t H = x.dim(1), W = x.dim(2), G = packed.groups, cin_g = x.dim(0) / G, cout_g = packed.cout_g,
          kdim = packed.kdim, P = Ho * Wo;
  const IsaKernels& kern = active_kernels();
  const ConvKernels& ck = active_conv_kernels();
  int64_t NR = kern.nr, MR = kern.mr;

  PatchGeom geom(int64_t g) const {
    return {x.data<float>() + g * cin_g * H * W, cin_g, H, W, Kh, Kw, Wo, {p.stride[0], p.stride[1]},
            {p.padding[0], p.padding[1]}, {p.dilation[0], p.dilation[1]}};
  }
};

}  // namespace

// Few output positions (ResNet-50's 14x14 and 7x7 stages: 7 and 2 panels): splitting them
// between threads left each thread one to four panels, each thread streaming the whole weight
// matrix from memory for them (the 7x7 stage's 3x3 conv: 9.4 MB, used for one 32-position panel
// of which 17 are real), and unevenly (7 panels: 4 + 3). There the patches of all positions are
// packed once, shared, and the threads split the output channels instead: each weight is read by
// one thread and used for every panel. On one thread this is only the loop order, and it still
// pays: the per-slice packing re-streamed the weights once per slice of `budget` panels (4 times
// for the 14x14 stage's 3x3). Same tiles and K slices as conv2d_im2col: same bits.
bool use_channel_split(int64_t panels, int64_t kdim, int64_t NR, int64_t cout_g, int64_t MR) {
  const int64_t threads = num_threads();
  return panels < 8 * threads && cout_g >= 4 * MR * threads &&
         panels * NR * kdim <= kSharedPatchFloats;
}

void conv2d_channel_split(const Tensor& x, const ConvParams& p, int64_t Kh, int64_t Kw, int64_t Ho,
                          int64_t Wo, const EpilogueRows& ep, const PackedConvWeights& packed, Tensor& y) {
  const Driver d{x, p, Kh, Kw, Ho, Wo, packed};
  const int64_t G = d.G, cout_g = d.cout_g, kdim = d.kdim, P = d.P, NR = d.NR, MR = d.MR, MC = MR * 16;
  const IsaKernels& kern = d.kern;
  const ConvKernels& ck = d.ck;
  const int64_t panels = (P + NR - 1) / NR;
  thread_local std::unique_ptr<HeapBuffer> shared;  // the calling thread's, lent to the team
  float* pp = grown_scratch(shared, static_cast<size_t>(panels * NR * kdim) * sizeof(float));
  float* py = y.data<float>();
  const int64_t blocks = (cout_g + MR - 1) / MR;
  for (int64_t g = 0; g < G; ++g) {
    const PatchGeom geom = d.geom(g);
    parallel_for(panels, 1, [&](int64_t q0, int64_t q1) {
      ck.pack_patches(geom, q0 * NR, std::min(q1 * NR, P) - q0 * NR, NR, pp + q0 * kdim * NR);
    });
    parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
      const int64_t end = std::min(b1 * MR, cout_g);
      for (int64_t ic = b0 * MR; ic < end; ic += MC) {
        const int64_t ic1 = std::min(ic + MC, end);
        for (int64_t pc = 0; pc < kdim; pc += kConvKC) {
          const int64_t kc = std::min(kConvKC, kdim - pc);
          const bool last = pc + kc >= kdim;
          for (int64_t jr = 0; jr < P; jr += NR) {
            const int64_t nr = std::min(NR, P - jr);
            const float* bp = pp + jr * kdim + pc * NR;
            for (int64_t ir = ic; ir < ic1; ir += MR) {
              const int64_t mr = std::min(MR, ic1 - ir), o = g * cout_g + ir;
              kern.sgemm(kc, packed.panel(g, ir / MR) + pc * MR, bp, py + o * P + jr, P, mr, nr, pc > 0);
              if (last) ck.epilogue(ep, py, o, mr, jr, nr);
            }
          }
        }
      }
    });
  }
}

// Few output positions and whole NR-channel panels (ResNet-50's 14x14 and 7x7 stages: 196 and
// 49 positions, 256 to 2048 channels): the GEMM transposed, yᵀ[P, Cout_g] = patches · wᵀ. The
// positions are the microkernel's rows (MR at a time; a partial tile runs exactly its rows), the
// output channels its NR-wide panels, so P = 49 computes 49 rows where NR-position panels
// computed 64 (23% of the FMAs wasted; 12.5% at 196). The patches of all positions are packed
// once and shared; the threads take channel panels from a shared counter (each weight is read by
// one thread, a descheduled thread's panels go to the other). A panel's [P, NR] result is
// transposed into y and the shared epilogue runs on it while it is in L1. Same K slices and the
// same per-element FMA chain as conv2d_im2col: same bits.
// With gathered rows (use_gathered_rows) up to 32 NR positions: ResNet-50's 3x3 / 2 at 56x56 (784
// outputs) took 2.66 ms on one thread as packed panels and takes 2.11 ms so.
bool use_transposed(int64_t P, int64_t kdim, int64_t cout_g, int64_t NR, int64_t MR, bool gathered) {
  const int64_t panels_p = (P + MR - 1) / MR;
  return P < (gathered ? 32 : 16) * NR && P % NR != 0 && cout_g % NR == 0 && cout_g >= 2 * NR * num_threads() &&
         panels_p * MR * kdim <= kSharedPatchFloats;
}

bool use_gathered_rows(const ConvParams& p, int64_t Kh, int64_t Kw, const IsaKernels& kern) {
  return active_isa() == Isa::Avx512 && kern.mr == kPointwiseMR && kern.nr == kPointwiseNR && Kh * Kw > 1 &&
         (p.stride[1] == 1 || p.stride[1] == 2);
}

// The transposed tile's rows gathered from a zero-padded copy of the input (AVX-512): a tile is a
// run of positions on one output row (stride 1 or 2 apart in the copy) or two whole output rows
// that fit one tile (7 wide: 14 rows, as with packed patches), so no patch matrix is written; the
// copy is ~1.6x (3x3 at 7x7) to ~4x (3x3 stride 2) smaller than the patches and stays in L2.
struct GatherTile {
  int64_t row, off1, r1, off2, r2;  // first position (the tile's row in yᵀ), offsets into the copy
};

void conv2d_transposed(const Tensor& x, const ConvParams& p, int64_t Kh, int64_t Kw, int64_t Ho,
                       int64_t Wo, const EpilogueRows& ep, const PackedConvWeights& packed, Tensor& y) {
  const Driver d{x, p, Kh, Kw, Ho, Wo, packed};
  // packed.mr == NR: the weights are the NR-wide operand
  const int64_t cout_g = d.cout_g, cin_g = d.cin_g, kdim = d.kdim, P = d.P, NR = d.NR, MR = d.MR;
  const int64_t H = d.H, W = d.W;
  const int64_t panels_p = (P + MR - 1) / MR;
  // 1x1 stride 1: the microkernel reads its rows (positions) straight from x, nothing is packed.
  const bool in_place = use_pointwise_in_place(p, Kh, Kw, d.kern);
  const int64_t sh = p.stride[0], sw = p.stride[1], dh = p.dilation[0], dw = p.dilation[1];
  const int64_t Hp = (Ho - 1) * sh + (Kh - 1) * dh + 1, Wp = (Wo - 1) * sw + (Kw - 1) * dw + 1;
  const bool gather = use_gathered_rows(p, Kh, Kw, d.kern) && cin_g * Hp * Wp <= kSharedPatchFloats;
  thread_local std::unique_ptr<HeapBuffer> shared;  // the calling thread's, lent to the team
  const int64_t floats = in_place ? 0 : gather ? cin_g * Hp * Wp : panels_p * MR * kdim;
  float* pp = grown_scratch(shared, static_cast<size_t>(floats) * sizeof(float));
  thread_local std::vector<int32_t> koff_buf;  // the caller's; the team reads them through koff / tiles
  thread_local std::vector<GatherTile> tile_buf;
  if (gather) {
    koff_buf.resize(static_cast<size_t>(kdim));
    for (int64_t c = 0, k = 0; c < cin_g; ++c)
      for (int64_t kh = 0; kh < Kh; ++kh)
        for (int64_t kw = 0; kw < Kw; ++kw) koff_buf[k++] = static_cast<int32_t>(c * Hp * Wp + kh * dh * Wp + kw * dw);
    tile_buf.clear();
    if (2 * Wo <= MR)
      for (int64_t oh = 0; oh < Ho; oh += 2)
        tile_buf.push_back({oh * Wo, oh * sh * Wp, Wo, (oh + 1) * sh * Wp, oh + 1 < Ho ? Wo : 0});
    else
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ow += MR) {
          const int64_t off = oh * sh * Wp + ow * sw;
          tile_buf.push_back({oh * Wo + ow, off, std::min(MR, Wo - ow), off, 0});
        }
  }
  const int32_t* koff = koff_buf.data();
  const GatherTile* tiles = tile_buf.data();
  const int64_t ntiles = static_cast<int64_t>(tile_buf.size());
  float* py = y.data<float>();
  const int64_t blocks = cout_g / NR;
  for (int64_t g = 0; g < d.G; ++g) {
    const PatchGeom geom = d.geom(g);
    if (gather)  // the group's planes with their zero padding (rows and columns past Hp / Wp unused)
      parallel_for(cin_g, 8, [&](int64_t c0, int64_t c1) {
        const int64_t left = std::min(p.padding[1], Wp), n = std::clamp<int64_t>(Wp - left, 0, W);
        for (int64_t c = c0; c < c1; ++c)
          for (int64_t r = 0; r < Hp; ++r) {
            float* dst = pp + (c * Hp + r) * Wp;
            const int64_t ih = r - p.padding[0];
            if (ih < 0 || ih >= H) {
              std::fill(dst, dst + Wp, 0.0f);
              continue;
            }
            std::fill(dst, dst + left, 0.0f);
            std::copy_n(geom.x + (c * H + ih) * W, n, dst + left);
            std::fill(dst + left + n, dst + Wp, 0.0f);
          }
      });
    else if (!in_place)
      parallel_for(panels_p, 1, [&](int64_t q0, int64_t q1) {
        d.ck.pack_patches(geom, q0 * MR, std::min(q1 * MR, P) - q0 * MR, MR, pp + q0 * kdim * MR);
      });
    std::atomic<int64_t> next{0};
    parallel_for(std::min<int64_t>(num_threads(), blocks), 1, [&](int64_t, int64_t) {
      thread_local std::vector<float> tile;  // [P, NR]: one channel panel's yᵀ
      tile.resize(static_cast<size_t>(P * NR));
      float* t = tile.data();
      for (int64_t b; (b = next.fetch_add(1)) < blocks;) {
        const float* wb = packed.panel(g, b);
        for (int64_t pc = 0; pc < kdim; pc += kConvKC) {
          const int64_t kc = std::min(kConvKC, kdim - pc);
          // 1x1: the next K slice of this weight panel, fetched into L2 a share per row block.
          // Few positions use each weight a few times only, so the first row block of a slice
          // otherwise waits on memory (a whole network's weights do not stay in cache): 1.06x on
          // the 7x7 stage's 1x1s with the cache flushed. Not with packed patches, which fill L2
          // themselves (the 7x7 stage's 3x3: 1 MB; prefetching there measured 0.95x), and not
          // with gathered rows so far (0.96x-1.07x per layer with the cache flushed, under load).
          const int64_t rows = gather ? ntiles : panels_p;  // row blocks per K slice
          const float* next_w = wb + (pc + kc) * NR;
          const int64_t next_lines = in_place ? std::min(kConvKC, kdim - pc - kc) * NR / 16 : 0;
          const int64_t share = (next_lines + rows - 1) / rows;
          for (int64_t i = 0; i < rows; ++i) {
            for (int64_t l = i * share, l1 = std::min(l + share, next_lines); l < l1; ++l)
              __builtin_prefetch(next_w + l * 16, 0, 2);
            const int64_t ir = i * MR;
            if (gather) {
              const GatherTile& gt = tiles[i];
              sgemm_a_gather_avx512(kc, pp + gt.off1, gt.r1, pp + gt.off2, gt.r2, sw, koff + pc, wb + pc * NR,
                                    t + gt.row * NR, NR, NR, pc > 0);
            } else if (in_place) {
              sgemm_a_in_place_avx512(kc, geom.x + pc * P + ir, P, wb + pc * NR, t + ir * NR, NR,
                                      std::min(MR, P - ir), NR, pc > 0);
            } else {
              d.kern.sgemm(kc, pp + ir * kdim + pc * MR, wb + pc * NR, t + ir * NR, NR, std::min(MR, P - ir),
                           NR, pc > 0);
            }
          }
        }
        const int64_t o0 = g * cout_g + b * NR;
        d.ck.transpose_tile(t, P, NR, py + o0 * P, P);
        d.ck.epilogue(ep, py, o0, NR, 0, P);
      }
    });
  }
}

}  // namespace xdna::host
