// Shared by conv.cpp and its GEMM drivers (conv_pointwise.cpp, conv_few_positions.cpp): the packed
// weights, their cache and the drivers' selection rules. Not part of the public API.
#pragma once
#include <cstdint>
#include <memory>

#include "core/tensor.h"
#include "host/conv.h"
#include "host/conv_kernels.h"
#include "host/gemm.h"

namespace xdna::host {

// The weights as the microkernel's left operand: per group, MR-row panels over all of kdim,
// panel i of group g at (g panels_g + i) kdim MR with a[k MR + r] = w[g cout_g + i MR + r][k]
// (zero past the group's rows). A KC slice of a panel is then the [kc][MR] block sgemm reads.
struct PackedConvWeights {
  int64_t mr = 0, groups = 0, cout_g = 0, kdim = 0;
  std::unique_ptr<HeapBuffer> storage;
  const float* panel(int64_t g, int64_t i) const {
    const int64_t panels_g = (cout_g + mr - 1) / mr;
    return reinterpret_cast<const float*>(storage->data()) + (g * panels_g + i) * kdim * mr;
  }
};

// The packing of w for G groups and MR-row panels; constant weights are packed once and cached
// (keyed by w's buffer, which the cache holds), others on every call.
std::shared_ptr<const PackedConvWeights> conv_weights(const Tensor& w, int64_t G, int64_t MR, bool constant);

// The patch packing and epilogue compiled for the running CPU's instruction set.
const ConvKernels& active_conv_kernels();

// K slice depth of the conv GEMM: a KC x NR patch micro-panel (24 KiB at NR 32) stays in L1
// while the weight panels stream past it from L2.
constexpr int64_t kConvKC = 192;
// Patches per GEMM call: about 640 KiB of f32, so that a thread's patches stay in its L2 cache
// between being written and being read by the microkernel.
constexpr int64_t kPatchBudget = 160 * 1024;
// The most patch floats the few-positions drivers pack at once (8 MiB), shared by all threads.
constexpr int64_t kSharedPatchFloats = 2 * 1024 * 1024;

// 1x1, stride 1, no padding, on the AVX-512 microkernel: the patch matrix is x itself ([Cin_g, P],
// row stride P), so the microkernel reads that operand in place (conv_pointwise_avx512.cpp)
// instead of from a packed copy of every input value (~9% of ResNet-50's time).
bool use_pointwise_in_place(const ConvParams& p, int64_t Kh, int64_t Kw, const IsaKernels& kern);
// conv_pointwise.cpp: conv2d_im2col's thread split and slices with B read from x's rows.
void conv2d_pointwise(const Tensor& x, const EpilogueRows& ep, const PackedConvWeights& packed, Tensor& y);

// conv_few_positions.cpp: ResNet-50's 14x14 and 7x7 stages. Transposed: positions as the
// microkernel's rows, packed with NR-row weight panels (packed.mr == NR).
// Gathered rows: on AVX-512, kernels larger than 1x1 at column stride 1 or 2 read the
// transposed tile's rows from a zero-padded copy of the input instead of packed patches.
bool use_gathered_rows(const ConvParams& p, int64_t Kh, int64_t Kw, const IsaKernels& kern);
bool use_transposed(int64_t P, int64_t kdim, int64_t cout_g, int64_t NR, int64_t MR, bool gathered);
void conv2d_transposed(const Tensor& x, const ConvParams& p, int64_t Kh, int64_t Kw, int64_t Ho, int64_t Wo,
                       const EpilogueRows& ep, const PackedConvWeights& packed, Tensor& y);
// Channel split: the patches of all positions packed once, the threads split the output channels.
bool use_channel_split(int64_t panels, int64_t kdim, int64_t NR, int64_t cout_g, int64_t MR);
void conv2d_channel_split(const Tensor& x, const ConvParams& p, int64_t Kh, int64_t Kw, int64_t Ho, int64_t Wo,
                          const EpilogueRows& ep, const PackedConvWeights& packed, Tensor& y);

}  // namespace xdna::host
