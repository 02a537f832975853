#include "npu/sim_program.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <type_traits>

#include "aie_kernels/kernels.h"

namespace xdna::npu {

namespace {

constexpr int64_t kObj = 2048;  // the fused designs' DDR object (design_families_fused.cpp)
constexpr int kCores = 4;

using sim::drain;
using sim::fail;

// An operand object as whichever pointer type the entry point takes.
struct Obj {
  uint8_t* p;
  template <class T>
  operator T*() const { return reinterpret_cast<T*>(p); }
};

int32_t scalar(const StageScalars& s, const char* name) {
  auto it = s.find(name);
  if (it == s.end()) throw std::invalid_argument(std::string("stage kernel: no scalar '") + name + "'");
  return int32_t(it->second);
}

// The kernel's L1 state type: each core the interpreter runs gets its own, made fresh.
template <class State>
void set_state(StageKernel& k, State&) {
  static_assert(std::is_trivially_copyable_v<State>, "a core's state is plain data");
  k.fresh_state = [] { return std::shared_ptr<void>(std::make_shared<State>()); };
}

#define S(n) scalar(s, n)
#define ENTRY(fn, ARGS) {#fn, [](uint8_t* const* o, const StageScalars& s) { fn(Obj{o[0]}, ARGS); }}

#define MLP_ARGS S("cores"), S("gelu"), S("hidden"), S("intermediate")
StageKernel mlp_fused() {
  StageKernel k{"mlp_fused_bf16", {
      ENTRY(mlp_fused_bf16_x, MLP_ARGS), ENTRY(mlp_fused_bf16_gate_up, MLP_ARGS),
      ENTRY(mlp_fused_bf16_gate_up_give, MLP_ARGS), ENTRY(mlp_fused_bf16_gate_up_take, MLP_ARGS),
      ENTRY(mlp_fused_bf16_down, MLP_ARGS), ENTRY(mlp_fused_bf16_down_give, MLP_ARGS),
      ENTRY(mlp_fused_bf16_down_take, MLP_ARGS), ENTRY(mlp_fused_bf16_down_result, MLP_ARGS)},
      {"cores", "gelu", "hidden", "intermediate"}};
  set_state(k, xk_impl::mlp_fused_bf16_state());
  return k;
}

#define QKV_ARGS S("cores"), S("head_dim"), S("heads"), S("hidden"), S("kv_heads"), S("qk_norm"), \
                 S("eps_bits"), S("offset_bits"), S("interleaved")
StageKernel qkv_rope() {
  StageKernel k{"qkv_rope_bf16", {
      ENTRY(qkv_rope_bf16_x, QKV_ARGS), ENTRY(qkv_rope_bf16_qkv, QKV_ARGS),
      ENTRY(qkv_rope_bf16_qkv_give, QKV_ARGS), ENTRY(qkv_rope_bf16_qkv_take, QKV_ARGS),
      ENTRY(qkv_rope_bf16_rope, QKV_ARGS), ENTRY(qkv_rope_bf16_rope_result, QKV_ARGS),
      ENTRY(qkv_rope_bf16_rope_kv_new, QKV_ARGS)},
      {"cores", "head_dim", "heads", "hidden", "kv_heads", "qk_norm", "eps_bits", "offset_bits", "interleaved"}};
  set_state(k, xk_impl::qkv_rope_bf16_state());
  return k;
}

#define ATTN_ARGS S("context"), S("core"), S("cores"), S("head_dim"), S("heads"), S("kv_heads"), S("scale_bits")
StageKernel attention_decode() {
  StageKernel k{"attention_decode_bf16", {
      ENTRY(attention_decode_bf16_q, ATTN_ARGS), ENTRY(attention_decode_bf16_attention, ATTN_ARGS),
      ENTRY(attention_decode_bf16_attention_give, ATTN_ARGS), ENTRY(attention_decode_bf16_attention_take, ATTN_ARGS),
      ENTRY(attention_decode_bf16_attention_result, ATTN_ARGS)},
      {"context", "core", "cores", "head_dim", "heads", "kv_heads", "scale_bits"}};
  set_state(k, xk_impl::attention_decode_bf16_state());
  return k;
}

#define HEAD_ARGS S("cores"), S("hidden"), S("vocab"), S("eps_bits"), S("offset_bits")
// The entry table of the lm_head kernel named p: bf16 and int8 weights share it.
#define HEAD_KERNEL(p)                                                                                           \
  StageKernel {                                                                                                  \
    #p,                                                                                                          \
        {ENTRY(p##_x, HEAD_ARGS), ENTRY(p##_norm, HEAD_ARGS), ENTRY(p##_rows, HEAD_ARGS),                        \
         ENTRY(p##_rows_out, HEAD_ARGS)},                                                                        \
    { "cores", "hidden", "vocab", "eps_bits", "offset_bits" }                                                    \
  }
StageKernel lm_head() {
  StageKernel k = HEAD_KERNEL(lm_head_bf16);
  set_state(k, xk_impl::lm_head_bf16_state());
  return k;
}

StageKernel lm_head_int8() {
  StageKernel k = HEAD_KERNEL(lm_head_int8);
  set_state(k, xk_impl::lm_head_int8_state());
  return k;
}

#define LAYER_ARGS S("context"), S("core"), S("cores"), S("gelu"), S("head_dim"), S("heads"), S("hidden"), \
                   S("intermediate"), S("kv_heads"), S("post_norms"), S("qk_norm"),       \
                   S("eps_bits"), S("offset_bits"), S("interleaved"), S("scale_bits")
// The entry table of the decode_layer kernel named p: bf16 and int8 weights share it.
#define LAYER_KERNEL(p)                                                                                          \
  StageKernel {                                                                                                  \
    #p,                                                                                                          \
        {ENTRY(p##_x, LAYER_ARGS), ENTRY(p##_qkv, LAYER_ARGS), ENTRY(p##_qkv_give, LAYER_ARGS),                  \
         ENTRY(p##_qkv_take, LAYER_ARGS), ENTRY(p##_rope, LAYER_ARGS), ENTRY(p##_rope_kv_new, LAYER_ARGS),       \
         ENTRY(p##_attention, LAYER_ARGS), ENTRY(p##_attention_give, LAYER_ARGS),                                \
         ENTRY(p##_attention_take, LAYER_ARGS), ENTRY(p##_o, LAYER_ARGS), ENTRY(p##_o_give, LAYER_ARGS),         \
         ENTRY(p##_o_take, LAYER_ARGS), ENTRY(p##_gate_up, LAYER_ARGS), ENTRY(p##_gate_up_give, LAYER_ARGS),     \
         ENTRY(p##_gate_up_take, LAYER_ARGS), ENTRY(p##_down, LAYER_ARGS), ENTRY(p##_down_give, LAYER_ARGS),     \
         ENTRY(p##_down_take, LAYER_ARGS), ENTRY(p##_down_result, LAYER_ARGS)},                                  \
    {                                                                                                            \
      "context", "core", "cores", "gelu", "head_dim", "heads", "hidden", "intermediate", "kv_heads",             \
          "post_norms", "qk_norm", "eps_bits", "offset_bits", "interleaved", "scale_bits"                        \
    }                                                                                                            \
  }
StageKernel decode_layer() {
  StageKernel k = LAYER_KERNEL(decode_layer_bf16);
  set_state(k, xk_impl::decode_layer_bf16_state());
  return k;
}

StageKernel decode_layer_int8() {
  StageKernel k = LAYER_KERNEL(decode_layer_int8);
  set_state(k, xk_impl::decode_layer_int8_state());
  return k;
}

// int8 weights and an int8 KV cache: decode_layer_int8's entries plus kv_scales.
StageKernel decode_layer_int8_kv8() {
  StageKernel k = LAYER_KERNEL(decode_layer_int8_kv8);
  k.entries.insert(ENTRY(decode_layer_int8_kv8_kv_scales, LAYER_ARGS));
  set_state(k, xk_impl::decode_layer_int8_kv8_state());
  return k;
}

// int8 weights and an int4 KV cache: the same entries as decode_layer_int8_kv8.
StageKernel decode_layer_int8_kv4() {
  StageKernel k = LAYER_KERNEL(decode_layer_int8_kv4);
  k.entries.insert(ENTRY(decode_layer_int8_kv4_kv_scales, LAYER_ARGS));
  set_state(k, xk_impl::decode_layer_int8_kv4_state());
  return k;
}

#undef S
#undef ENTRY
#undef LAYER_KERNEL
#undef HEAD_KERNEL

std::vector<const TileUse*> cores_in_order(const Design& d) {
  std::vector<const TileUse*> cores;
  for (const TileUse& t : d.tiles)
    if (t.has_kernel) cores.push_back(&t);
  std::sort(cores.begin(), cores.end(), [](const TileUse* a, const TileUse* b) { return a->at < b->at; });
  if (cores.empty() || cores.size() % kCores)
    fail(d, "has " + std::to_string(cores.size()) + " cores, not whole columns of 4");
  return cores;
}

// Why a design does not fit kernel `name`'s L1 state (kernels.h bounds), or "" when it does.
std::string state_bounds(const std::string& name, const StageScalars& s) {
  using B = xk_impl::FusedBounds;
  const auto at = [&](const char* n) { return s.count(n) ? s.at(n) : int64_t(0); };
  const auto cdiv = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  const int64_t P = at("cores"), H = at("hidden"), I = at("intermediate"), D = at("head_dim"),
                heads = at("heads"), kvh = std::max<int64_t>(1, at("kv_heads"));
  std::string why;
  const auto need = [&](bool ok, const std::string& what) {
    if (!ok && why.empty()) why = what;
  };
  need(P >= 1 && P <= B::kMaxCores, "cores " + std::to_string(P) + " > " + std::to_string(B::kMaxCores));
  if (name == "mlp_fused_bf16") {
    using M = xk_impl::MlpFusedState;
    need(H <= M::kMaxHidden && I <= M::kMaxInter, "hidden or intermediate past the state's bounds");
    need(cdiv(H, P) <= M::kMaxRows && cdiv(I, P) <= M::kMaxRows, "a core's rows past the state's bounds");
    return why;
  }
  need(H <= B::kMaxHidden, "hidden " + std::to_string(H) + " > " + std::to_string(B::kMaxHidden));
  if (name == "lm_head_bf16" || name == "lm_head_int8") return why;  // logits leave object by object (a ring of two)
  const int64_t n_qkv = (heads + 2 * kvh) * D, group = heads / kvh;
  need(D <= B::kMaxDim && heads * D <= B::kMaxQ && n_qkv <= B::kMaxQkv, "heads x head_dim past the state's bounds");
  need(cdiv(n_qkv, P) <= B::kMaxRows && cdiv(H, P) <= B::kMaxRows && cdiv(I, P) <= B::kMaxRows && I <= B::kMaxInter,
       "a core's rows past the state's bounds");
  if (name == "attention_decode_bf16" || name == "decode_layer_bf16" || name == "decode_layer_int8" ||
      name == "decode_layer_int8_kv8" || name == "decode_layer_int8_kv4") {
    using A = xk_impl::AttnPartState;
    const int64_t per_core = cdiv(kvh, P), cores_per_kv = std::max<int64_t>(1, P / kvh);
    const int64_t ppc = cdiv(at("context"), cores_per_kv), partial = per_core * group * (D * 2 + 8);
    need(group <= A::kMaxGroup && group * ppc <= A::kMaxScores,
         "query heads per KV head x positions past the state's bounds");
    // The exchange is combined as it arrives (fused_stage.h attn_take): every core's {max, sum}
    // headers and an f32 accumulator per query head stay, not the gathered partials.
    need(partial <= A::kMaxPartial && per_core * group <= A::kMaxItems && heads <= A::kMaxHeads,
         "attention partials past the state's bounds");
    if (name == "decode_layer_int8_kv8" || name == "decode_layer_int8_kv4")  // the core's K/V scales part (scale_rows)
      need(per_core * cdiv(ppc, 256) * kObj <= xk_impl::DecodeLayerInt8Kv8State::kMaxKvScaleBytes,
           "the core's K/V scales past the state's bounds");
  }
  return why;
}

}  // namespace

const StageKernel& stage_kernel(const std::string& name) {
  static const std::map<std::string, StageKernel> kernels = [] {
    std::map<std::string, StageKernel> m;
    for (StageKernel k : {mlp_fused(), qkv_rope(), attention_decode(), lm_head(), decode_layer(), decode_layer_int8(),
                          decode_layer_int8_kv8(), decode_layer_int8_kv4(), lm_head_int8()})
      m[k.name] = k;
    return m;
  }();
  auto it = kernels.find(name);
  if (it == kernels.end()) throw std::invalid_argument("npu-sim: no stage kernel '" + name + "' in aie_kernels/");
  return it->second;
}

StageScalars runtime_scalars(const SimKernelArgs& k) {
  return {{"eps_bits", xk::f32_bits(k.eps)},
          {"offset_bits", xk::f32_bits(k.rms_offset)},
          {"scale_bits", xk::f32_bits(k.attn_scale)},
          {"interleaved", k.rope_interleaved ? 1 : 0}};
}

std::vector<std::string> scalars_beyond_program(const Design& d, const StageKernel& k) {
  const StageScalars runtime = runtime_scalars({});
  std::vector<std::string> beyond;
  for (const std::string& name : k.scalars) {
    if (runtime.count(name)) continue;  // passed by design.py as its runtime constants
    bool every_call = true;
    for (const TileUse& t : d.tiles)
      for (const CoreStep& s : t.program)
        if (s.op == CoreOp::Call && !s.args.count(name)) every_call = false;
    if (!every_call) beyond.push_back(name);
  }
  return beyond;
}

std::vector<std::vector<uint8_t>> program_streams(const Design& d, const HostArgs& args) {
  return sim::core_streams(d, args, int64_t(cores_in_order(d).size()));
}

std::map<std::string, std::vector<uint8_t>> run_core_programs(const Design& d, const StageKernel& k,
                                                              const std::vector<std::vector<uint8_t>>& streams,
                                                              const StageScalars& runtime) {
  const std::vector<const TileUse*> cores = cores_in_order(d);
  const size_t P = cores.size();
  if (streams.size() != P)
    fail(d, "has " + std::to_string(P) + " cores, got " + std::to_string(streams.size()) + " streams");
  const ObjectFifo* slice0 = d.find_fifo("slice_c0r0");
  const size_t slice = slice0 ? size_t(slice0->elem_bytes) : 0;
  struct Core {
    size_t pc = 0, ddr = 0, gives = 0, takes = 0;
    std::vector<std::array<int64_t, 3>> loops;  // first step, end, iterations left
    std::map<std::string, std::vector<uint8_t>> held;
    std::vector<std::vector<uint8_t>> spare;  // released objects' buffers, reused by the next acquires
    std::shared_ptr<void> state;  // the core's L1 state, which its entry points reach (xk::core_state)
  };
  std::vector<Core> cs(P);
  for (Core& c : cs) c.state = k.fresh_state();
  // The state the kernels' calls on this thread use: the called core's (unset again on return).
  struct Designate {
    ~Designate() { xk::t_core_state = nullptr; }
  } designate;
  // The L1 bounds are checked on the design's kernel args (what every Call passes).
  StageScalars bounds = runtime;
  for (const auto& [name, v] : cores[0]->kernel.args) bounds[name] = v;
  if (const std::string why = state_bounds(k.name, bounds); !why.empty())
    fail(d, k.name + " cannot run it: " + why);
  if (const std::vector<std::string> missing = scalars_beyond_program(d, k); !missing.empty()) {
    std::string names;
    for (const std::string& n : missing) names += (names.empty() ? "" : ", ") + n;
    fail(d, "its kernel args lack " + names + ", which " + k.name + " takes");
  }
  std::map<const CoreStep*, StageScalars> call_scalars;  // each Call step's scalars, merged once
  std::map<const CoreStep*, const ObjectFifo*> fifo_of;  // each Acquire step's FIFO, found once
  std::vector<std::vector<uint8_t>> joined;  // per exchange round: every core's slice in order
  std::vector<size_t> given;
  std::map<std::string, std::vector<uint8_t>> outputs;
  for (bool busy = true; busy;) {
    busy = false;
    for (size_t p = 0; p < P; ++p) {
      Core& c = cs[p];
      const std::vector<CoreStep>& prog = cores[p]->program;
      const auto next_step = [&] {  // unwinds finished loops; false when the program is done
        while (!c.loops.empty() && int64_t(c.pc) == c.loops.back()[1]) {
          if (--c.loops.back()[2] > 0) c.pc = size_t(c.loops.back()[0]);
          else c.loops.pop_back();
        }
        return c.pc < prog.size();
      };
      const auto waits = [&] {  // for an exchange some core has not given yet
        const CoreStep& s = prog[c.pc];
        return s.op == CoreOp::Acquire && s.name == "act" && (c.takes >= given.size() || given[c.takes] < P);
      };
      if (!next_step() || waits()) continue;
      xk::t_core_state = c.state.get();
      for (;;) {
        if (!next_step()) break;
        const CoreStep& s = prog[c.pc];
        if (s.op == CoreOp::Loop) {
          c.loops.push_back({int64_t(c.pc) + 1, int64_t(c.pc) + 1 + s.body, s.count});
        } else if (s.op == CoreOp::Acquire) {
          auto found = fifo_of.find(&s);
          if (found == fifo_of.end()) found = fifo_of.emplace(&s, d.find_fifo(s.name)).first;
          const ObjectFifo* f = found->second;
          if (!f) fail(d, "core " + to_string(cores[p]->at) + " acquires unknown FIFO " + s.name);
          if (s.name == "act" && waits()) break;  // for every core's slice
          std::vector<uint8_t> obj;  // a zeroed object of the FIFO's size, its buffer reused
          if (!c.spare.empty()) obj = std::move(c.spare.back()), c.spare.pop_back();
          if (s.name.rfind("ddr_", 0) == 0) {
            if ((c.ddr + 1) * kObj > streams[p].size())
              fail(d, "core " + to_string(cores[p]->at) + " reads past its DDR stream");
            const size_t n = std::min(size_t(f->elem_bytes), size_t(kObj));
            obj.resize(size_t(f->elem_bytes));
            std::memcpy(obj.data(), streams[p].data() + c.ddr * kObj, n);
            std::memset(obj.data() + n, 0, obj.size() - n);
            ++c.ddr;
          } else if (s.name == "act") {
            obj = joined[c.takes];
          } else {
            obj.assign(size_t(f->elem_bytes), 0);
          }
          c.held[s.name] = std::move(obj);
        } else if (s.op == CoreOp::Release) {
          std::vector<uint8_t>& obj = c.held[s.name];
          if (s.name.rfind("slice_", 0) == 0) {
            if (joined.size() <= c.gives) joined.emplace_back(slice * P), given.push_back(0);
            std::memcpy(joined[c.gives].data() + p * slice, obj.data(), slice);
            ++given[c.gives++];
          } else if (s.name == "act") {
            ++c.takes;
          } else if (s.name.rfind("ddr_", 0) != 0) {
            std::vector<uint8_t>& out = outputs[s.name];
            out.insert(out.end(), obj.begin(), obj.end());
          }
          c.spare.push_back(std::move(obj));
          c.held.erase(s.name);
        } else {
          auto e = k.entries.find(s.name);
          if (e == k.entries.end()) fail(d, "calls " + s.name + ", which " + k.name + " does not define");
          std::vector<uint8_t*> objects;
          for (const std::string& f : s.operands) objects.push_back(c.held.at(f).data());
          auto merged = call_scalars.find(&s);
          if (merged == call_scalars.end()) {
            StageScalars scalars = runtime;
            for (const auto& [name, v] : s.args) scalars[name] = v;
            merged = call_scalars.emplace(&s, std::move(scalars)).first;
          }
          e->second(objects.data(), merged->second);
        }
        ++c.pc;
        busy = true;
      }
    }
  }
  for (size_t p = 0; p < P; ++p)
    if (cs[p].pc != cores[p]->program.size())
      fail(d, "core " + to_string(cores[p]->at) + " stalls at step " + std::to_string(cs[p].pc) + " of its program");
  return outputs;
}

void run_design_programs(const Design& d, HostArgs& args, const SimKernelArgs& k) {
  if (args.size() != d.args.size()) fail(d, "takes " + std::to_string(d.args.size()) + " host arguments");
  const std::vector<const TileUse*> cores = cores_in_order(d);
  const StageKernel& sk = stage_kernel(cores.front()->kernel.name);
  std::map<std::string, std::vector<uint8_t>> out =
      run_core_programs(d, sk, program_streams(d, args), runtime_scalars(k));
  for (const char* fifo : {"result", "kv_new"})
    if (d.find_fifo(fifo)) drain(d, args, fifo, out[fifo]);
  // Joined outputs: column c drains [object][core][object bytes] of its cores' "out" FIFOs.
  for (size_t c = 0; c < cores.size() / kCores; ++c) {
    const std::string base = "out_c" + std::to_string(c);
    const ObjectFifo* f = d.find_fifo(base + "r0");
    if (!f) continue;
    const size_t obj = size_t(f->elem_bytes);
    std::vector<uint8_t> col;
    for (size_t o = 0; o * obj < out[base + "r0"].size(); ++o)
      for (int r = 0; r < kCores; ++r) {
        const std::vector<uint8_t>& v = out[base + "r" + std::to_string(r)];
        if ((o + 1) * obj > v.size())
          fail(d, "core (" + std::to_string(c) + "," + std::to_string(r) + ") gave fewer objects");
        col.insert(col.end(), v.begin() + int64_t(o * obj), v.begin() + int64_t((o + 1) * obj));
      }
    drain(d, args, base + "_l2l3", col);
  }
}

}  // namespace xdna::npu
