#include "core/cpu.h"

#include <cpuid.h>

#include <atomic>
#include <cstring>
#include <stdexcept>

namespace xdna {

static CpuFeatures detect() {
  CpuFeatures f;
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
  unsigned a, b, c, d;
  if (__get_cpuid(1, &a, &b, &c, &d)) f.f16c = (c >> 29) & 1;
  // AVX512_BF16: CPUID.(EAX=7,ECX=1):EAX bit 5 (GCC 12's __builtin_cpu_supports lacks it).
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512bf16 = f.avx512f && ((a >> 5) & 1);
  char brand[49] = {};
  for (unsigned i = 0; i < 3; ++i) {
    if (!__get_cpuid(0x80000002 + i, &a, &b, &c, &d)) break;
    std::memcpy(brand + 16 * i, &a, 4);
    std::memcpy(brand + 16 * i + 4, &b, 4);
    std::memcpy(brand + 16 * i + 8, &c, 4);
    std::memcpy(brand + 16 * i + 12, &d, 4);
  }
  f.brand = brand;
  while (!f.brand.empty() && f.brand.back() == ' ') f.brand.pop_back();
  return f;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

static Isa best_isa() {
  const auto& f = cpu_features();
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.fma && f.f16c) return Isa::Avx512;
  if (f.avx2 && f.fma && f.f16c) return Isa::Avx2;
  return Isa::Scalar;
}

static std::atomic<int> g_forced{-1};

Isa active_isa() {
  int f = g_forced.load(std::memory_order_relaxed);
  return f < 0 ? best_isa() : static_cast<Isa>(f);
}

void force_isa(Isa isa) {
  if (static_cast<int>(isa) > static_cast<int>(best_isa()))
    throw std::invalid_argument("this CPU does not support " + isa_name(isa));
  g_forced.store(static_cast<int>(isa));
}

std::string isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

bool has_avx512_bf16() { return active_isa() == Isa::Avx512 && cpu_features().avx512bf16; }
bool has_avx512_vnni() { return active_isa() == Isa::Avx512 && cpu_features().avx512vnni; }

}  // namespace xdna
