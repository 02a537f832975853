// conv.cpp's patch packing and epilogue built for AVX-512 (bodies: conv_kernels_impl.h).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "host/conv_kernels.h"

namespace xdna::host::conv_avx512 {
#include "host/conv_kernels_impl.h"
}  // namespace xdna::host::conv_avx512

namespace xdna::host {
const ConvKernels& conv_kernels_avx512() { return conv_avx512::kernels(); }
}  // namespace xdna::host
