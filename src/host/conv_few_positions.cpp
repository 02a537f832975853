// Convolutions with few output positions (ResNet-50's 14x14 and 7x7 stages): the channel split
// and the transposed tile (conv_gemm.h).
#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "core/parallel.h"
#include "host/conv_gemm.h"
#include "host/scratch_buffer.h"

namespace xdna::host {

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
  const int64_t Cin = x.dim(0), H = x.dim(1), W = x.dim(2);
  const int64_t G = packed.groups, cin_g = Cin / G, cout_g = packed.cout_g, kdim = packed.kdim;
  const int64_t P = Ho * Wo;
  const IsaKernels& kern = active_kernels();
  const int64_t NR = kern.nr, MR = kern.mr, MC = MR * 16;
  const ConvKernels& ck = active_conv_kernels();
  const int64_t panels = (P + NR - 1) / NR;
  thread_local std::unique_ptr<HeapBuffer> shared;  // the calling thread's, lent to the team
  float* pp = grown_scratch(shared, static_cast<size_t>(panels * NR * kdim) * sizeof(float));
  float* py = y.data<float>();
  const int64_t blocks = (cout_g + MR - 1) / MR;
  for (int64_t g = 0; g < G; ++g) {
    const PatchGeom geom{x.data<float>() + g * cin_g * H * W, cin_g, H, W, Kh, Kw, Wo,
                         {p.stride[0], p.stride[1]}, {p.padding[0], p.padding[1]},
                         {p.dilation[0], p.dilation[1]}};
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
bool use_transposed(int64_t P, int64_t kdim, int64_t cout_g, int64_t NR, int64_t MR) {
  const int64_t panels_p = (P + MR - 1) / MR;
  return P < 16 * NR && P % NR != 0 && cout_g % NR == 0 && cout_g >= 2 * NR * num_threads() &&
         panels_p * MR * kdim <= kSharedPatchFloats;
}

void conv2d_transposed(const Tensor& x, const ConvParams& p, int64_t Kh, int64_t Kw, int64_t Ho,
                       int64_t Wo, const EpilogueRows& ep, const PackedConvWeights& packed, Tensor& y) {
  const int64_t Cin = x.dim(0), H = x.dim(1), W = x.dim(2);
  const int64_t G = packed.groups, cin_g = Cin / G, cout_g = packed.cout_g, kdim = packed.kdim;
  const int64_t P = Ho * Wo;
  const IsaKernels& kern = active_kernels();
  const int64_t NR = kern.nr, MR = kern.mr;  // packed.mr == NR: the weights are the NR-wide operand
  const ConvKernels& ck = active_conv_kernels();
  const int64_t panels_p = (P + MR - 1) / MR;
  // 1x1 stride 1: the microkernel reads its rows (positions) straight from x, nothing is packed.
  const bool in_place = use_pointwise_in_place(p, Kh, Kw, kern);
  thread_local std::unique_ptr<HeapBuffer> shared;  // the calling thread's, lent to the team
  float* pp = grown_scratch(shared, in_place ? 0 : static_cast<size_t>(panels_p * MR * kdim) * sizeof(float));
  float* py = y.data<float>();
  const int64_t blocks = cout_g / NR;
  for (int64_t g = 0; g < G; ++g) {
    const PatchGeom geom{x.data<float>() + g * cin_g * H * W, cin_g, H, W, Kh, Kw, Wo,
                         {p.stride[0], p.stride[1]}, {p.padding[0], p.padding[1]},
                         {p.dilation[0], p.dilation[1]}};
    if (!in_place)
      parallel_for(panels_p, 1, [&](int64_t q0, int64_t q1) {
        ck.pack_patches(geom, q0 * MR, std::min(q1 * MR, P) - q0 * MR, MR, pp + q0 * kdim * MR);
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
          // themselves (the 7x7 stage's 3x3: 1 MB; prefetching there measured 0.95x).
          const float* next_w = wb + (pc + kc) * NR;
          const int64_t next_lines = in_place ? std::min(kConvKC, kdim - pc - kc) * NR / 16 : 0;
          const int64_t share = (next_lines + panels_p - 1) / panels_p;
          for (int64_t ir = 0; ir < P; ir += MR) {
            for (int64_t l = ir / MR * share, l1 = std::min(l + share, next_lines); l < l1; ++l)
              __builtin_prefetch(next_w + l * 16, 0, 2);
            if (in_place)
              sgemm_a_in_place_avx512(kc, geom.x + pc * P + ir, P, wb + pc * NR, t + ir * NR, NR,
                                      std::min(MR, P - ir), NR, pc > 0);
            else
              kern.sgemm(kc, pp + ir * kdim + pc * MR, wb + pc * NR, t + ir * NR, NR, std::min(MR, P - ir),
                         NR, pc > 0);
          }
        }
        const int64_t o0 = g * cout_g + b * NR;
        ck.transpose_tile(t, P, NR, py + o0 * P, P);
        ck.epilogue(ep, py, o0, NR, 0, P);
      }
    });
  }
}

}  // namespace xdna::host
