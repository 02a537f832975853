// conv.cpp's patch packing and epilogue built for AVX2 (bodies: conv_kernels_impl.h).
#include <algorithm>
#include <cstring>

#include "host/conv_kernels.h"

namespace xdna::host::conv_avx2 {
#include "host/conv_kernels_impl.h"
}  // namespace xdna::host::conv_avx2

namespace xdna::host {
const ConvKernels& conv_kernels_avx2() { return conv_avx2::kernels(); }
}  // namespace xdna::host
