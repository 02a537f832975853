// The AVX-512, AVX2 and portable row kernels of the host ops (ops_avx512.cpp, ops_avx2.cpp,
// ops.cpp) against double-precision references and against each other, on odd lengths (vector
// tails), special values and fully masked softmax rows.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "host/ops.h"

using namespace xdna;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The levels this CPU can run, best last.
std::vector<Isa> isas() {
  std::vector<Isa> out{Isa::Scalar};
  const CpuFeatures& f = cpu_features();
  if (f.avx2 && f.fma && f.f16c) out.push_back(Isa::Avx2);
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.fma && f.f16c) out.push_back(Isa::Avx512);
  return out;
}

// Runs fn once per instruction set, restoring the default level afterwards.
void for_each_isa(const std::function<void(Isa)>& fn) {
  const Isa best = active_isa();
  for (Isa isa : isas()) {
    force_isa(isa);
    SCOPED_TRACE(isa_name(isa));
    fn(isa);
  }
  force_isa(best);
}

std::vector<float> values(int64_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double silu_ref(double x) { return x / (1.0 + std::exp(-x)); }

void check_activation(Tensor (*op)(const Tensor&), double (*ref)(double), double tol) {
  for_each_isa([&](Isa) {
    for (int64_t n : {1, 7, 16, 33, 1000}) {
      std::vector<float> v = values(n, -12.0f, 12.0f, unsigned(n));
      const Tensor y = op(Tensor::from_vector({n}, v));
      for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(y.data<float>()[i], ref(v[i]), tol * std::max(1.0, std::abs(ref(v[i]))))
            << "x = " << v[i] << ", n = " << n;
    }
  });
}

}  // namespace

TEST(OpsIsa, Gelu) { check_activation(host::gelu, gelu_ref, 1e-6); }
TEST(OpsIsa, GeluTanh) { check_activation(host::gelu_tanh, gelu_tanh_ref, 1e-6); }
TEST(OpsIsa, Silu) { check_activation(host::silu, silu_ref, 1e-6); }

// Huge, infinite and NaN inputs come out the same (value or class) on every instruction set.
TEST(OpsIsa, SpecialValuesMatchPortable) {
  const std::vector<float> v{0.0f, -0.0f, 88.0f, -88.0f, 100.0f, -100.0f, 1e30f, -1e30f,
                             kInf, -kInf, std::numeric_limits<float>::quiet_NaN(), 3.0f, -3.0f};
  const int64_t n = static_cast<int64_t>(v.size());
  for (auto op : {host::gelu, host::gelu_tanh, host::silu}) {
    force_isa(Isa::Scalar);
    const Tensor want = op(Tensor::from_vector({n}, v));
    for_each_isa([&](Isa) {
      const Tensor got = op(Tensor::from_vector({n}, v));
      for (int64_t i = 0; i < n; ++i) {
        const float a = got.data<float>()[i], b = want.data<float>()[i];
        if (std::isfinite(b))
          EXPECT_NEAR(a, b, 1e-6f * std::max(1.0f, std::abs(b))) << "x = " << v[i];
        else if (std::isnan(b))
          EXPECT_TRUE(std::isnan(a)) << "x = " << v[i];
        else
          EXPECT_EQ(a, b) << "x = " << v[i];
      }
    });
  }
}

TEST(OpsIsa, SoftmaxRowsWithMasksAndTails) {
  for_each_isa([&](Isa) {
    for (int64_t d : {1, 5, 16, 17, 40, 128}) {
      const int64_t rows = 4;
      std::vector<float> v = values(rows * d, -30.0f, 30.0f, unsigned(d));
      for (int64_t j = 0; j < d; j += 3) v[j] = -kInf;  // row 0: some keys hidden
      for (int64_t j = 0; j < d; ++j) v[d + j] = -kInf;  // row 1 (and row 0 at d = 1): fully masked
      v[2 * d] = 80.0f;                                  // row 2: one large logit
      const Tensor y = host::softmax(Tensor::from_vector({rows, d}, v));
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = v.data() + r * d;
        double mx = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < d; ++j) mx = std::max<double>(mx, row[j]);
        for (int64_t j = 0; j < d; ++j) sum += std::exp(double(row[j]) - mx);
        for (int64_t j = 0; j < d; ++j) {
          const double want = std::isinf(mx) ? 0.0 : std::exp(double(row[j]) - mx) / sum;
          ASSERT_NEAR(y.data<float>()[r * d + j], want, 1e-6) << "row " << r << ", d = " << d;
        }
      }
    }
  });
}

TEST(OpsIsa, NormsWithLargeMeanAndTails) {
  for_each_isa([&](Isa) {
    for (int64_t d : {1, 7, 37, 384}) {
      const int64_t rows = 3;
      std::vector<float> x = values(rows * d, 99.0f, 101.0f, unsigned(d));
      const std::vector<float> w = values(d, 0.5f, 1.5f, 7), b = values(d, -1.0f, 1.0f, 8);
      const Tensor tx = Tensor::from_vector({rows, d}, x), tw = Tensor::from_vector({d}, w),
                   tb = Tensor::from_vector({d}, b);
      const Tensor ln = host::layer_norm(tx, tw, &tb, 1e-5f);
      const Tensor rn = host::rms_norm(tx, tw, 1e-6f, 1.0f);
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = x.data() + r * d;
        double mean = 0.0, var = 0.0, ss = 0.0;
        for (int64_t j = 0; j < d; ++j) mean += row[j], ss += double(row[j]) * row[j];
        mean /= double(d);
        for (int64_t j = 0; j < d; ++j) var += (row[j] - mean) * (row[j] - mean);
        const double inv = 1.0 / std::sqrt(var / double(d) + 1e-5), rinv = 1.0 / std::sqrt(ss / double(d) + 1e-6);
        for (int64_t j = 0; j < d; ++j) {
          ASSERT_NEAR(ln.data<float>()[r * d + j], (row[j] - mean) * inv * w[j] + b[j], 5e-5)
              << "layer_norm d = " << d;  // the f32 mean of ~100 is off by up to 3.8e-6
          ASSERT_NEAR(rn.data<float>()[r * d + j], row[j] * rinv * (1.0 + w[j]), 2e-6)
              << "rms_norm d = " << d;
        }
      }
    }
  });
}
