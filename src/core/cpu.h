// CPU feature detection and the instruction-set level the host kernels dispatch on.
#pragma once
#include <string>

namespace xdna {

enum class Isa { Scalar, Avx2, Avx512 };  // Avx512 = F/BW/VL/DQ (+ VNNI, BF16 when present)

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512bf16 = false;
  std::string brand;
};

const CpuFeatures& cpu_features();
// The level kernels use: the best the CPU has, unless lowered by force_isa (tests and benchmarks
// use it to exercise the AVX2 path on AVX-512 machines). Raising above the CPU's level throws.
Isa active_isa();
void force_isa(Isa isa);
std::string isa_name(Isa isa);
// True when native bf16 dot products (vdpbf16ps) / int8 VNNI are usable at the active level.
bool has_avx512_bf16();
bool has_avx512_vnni();

}  // namespace xdna
