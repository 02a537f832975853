#include "npu/sim_program.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string_view>
#include <type_traits>

#include "aie_kernels/kernels.h"
#include "core/parallel.h"

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

// The index of scalar `n` in a kernel's scalar list, at compile time (a name not in the list is a
// compile error).
template <size_t N>
constexpr int scalar_index(const std::array<std::string_view, N>& list, std::string_view n) {
  for (size_t i = 0; i < N; ++i)
    if (list[i] == n) return int(i);
  throw std::invalid_argument("no such scalar");
}
template <size_t N>
std::vector<std::string> scalar_names(const std::array<std::string_view, N>& list) {
  return {list.begin(), list.end()};
}

// S(list, n): the entry point's scalar `n`, from `v` (the kernel's scalars in `list` order).
#define S(list, n) v[std::integral_constant<int, scalar_index(list, n)>::value]
#define ENTRY(fn, ARGS) {#fn, [](uint8_t* const* o, const int32_t* v) { fn(Obj{o[0]}, ARGS); }}

constexpr std::array<std::string_view, 4> kMlpScalars = {"cores", "gelu", "hidden", "intermediate"};
constexpr std::array<std::string_view, 9> kQkvScalars = {"cores",   "head_dim", "heads",      "hidden",     "kv_heads",
                                                         "qk_norm", "eps_bits", "offset_bits", "interleaved"};
constexpr std::array<std::string_view, 7> kAttnScalars = {"context", "core",     "cores",     "head_dim",
                                                          "heads",   "kv_heads", "scale_bits"};
constexpr std::array<std::string_view, 5> kHeadScalars = {"cores", "hidden", "vocab", "eps_bits", "offset_bits"};
constexpr std::array<std::string_view, 15> kLayerScalars = {
    "context",   "core",       "cores",   "gelu",     "head_dim",    "heads",       "hidden",    "intermediate",
    "kv_heads",  "post_norms", "qk_norm", "eps_bits", "offset_bits", "interleaved", "scale_bits"};

#define MLP_ARGS S(kMlpScalars, "cores"), S(kMlpScalars, "gelu"), S(kMlpScalars, "hidden"), S(kMlpScalars, "intermediate")
StageKernel mlp_fused() {
  StageKernel k{"mlp_fused_bf16", {
      ENTRY(mlp_fused_bf16_x, MLP_ARGS), ENTRY(mlp_fused_bf16_gate_up, MLP_ARGS),
      ENTRY(mlp_fused_bf16_gate_up_give, MLP_ARGS), ENTRY(mlp_fused_bf16_gate_up_take, MLP_ARGS),
      ENTRY(mlp_fused_bf16_down, MLP_ARGS), ENTRY(mlp_fused_bf16_down_give, MLP_ARGS),
      ENTRY(mlp_fused_bf16_down_take, MLP_ARGS), ENTRY(mlp_fused_bf16_down_result, MLP_ARGS)},
      scalar_names(kMlpScalars)};
  set_state(k, xk_impl::mlp_fused_bf16_state());
  return k;
}

#define QK(n) S(kQkvScalars, n)
#define QKV_ARGS QK("cores"), QK("head_dim"), QK("heads"), QK("hidden"), QK("kv_heads"), QK("qk_norm"), \
                 QK("eps_bits"), QK("offset_bits"), QK("interleaved")
StageKernel qkv_rope() {
  StageKernel k{"qkv_rope_bf16", {
      ENTRY(qkv_rope_bf16_x, QKV_ARGS), ENTRY(qkv_rope_bf16_qkv, QKV_ARGS),
      ENTRY(qkv_rope_bf16_qkv_give, QKV_ARGS), ENTRY(qkv_rope_bf16_qkv_take, QKV_ARGS),
      ENTRY(qkv_rope_bf16_rope, QKV_ARGS), ENTRY(qkv_rope_bf16_rope_result, QKV_ARGS),
      ENTRY(qkv_rope_bf16_rope_kv_new, QKV_ARGS)},
      scalar_names(kQkvScalars)};
  set_state(k, xk_impl::qkv_rope_bf16_state());
  return k;
}

#define AT(n) S(kAttnScalars, n)
#define ATTN_ARGS AT("context"), AT("core"), AT("cores"), AT("head_dim"), AT("heads"), AT("kv_heads"), AT("scale_bits")
StageKernel attention_decode() {
  StageKernel k{"attention_decode_bf16", {
      ENTRY(attention_decode_bf16_q, ATTN_ARGS), ENTRY(attention_decode_bf16_attention, ATTN_ARGS),
      ENTRY(attention_decode_bf16_attention_give, ATTN_ARGS), ENTRY(attention_decode_bf16_attention_take, ATTN_ARGS),
      ENTRY(attention_decode_bf16_attention_result, ATTN_ARGS)},
      scalar_names(kAttnScalars)};
  set_state(k, xk_impl::attention_decode_bf16_state());
  return k;
}

#define HD(n) S(kHeadScalars, n)
#define HEAD_ARGS HD("cores"), HD("hidden"), HD("vocab"), HD("eps_bits"), HD("offset_bits")
// The entry table of the lm_head kernel named p: bf16 and int8 weights share it.
#define HEAD_KERNEL(p)                                                                                           \
  StageKernel {                                                                                                  \
    #p,                                                                                                          \
        {ENTRY(p##_x, HEAD_ARGS), ENTRY(p##_norm, HEAD_ARGS), ENTRY(p##_rows, HEAD_ARGS),                        \
         ENTRY(p##_rows_out, HEAD_ARGS)},                                                                        \
    scalar_names(kHeadScalars)                                                                                   \
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

#define LY(n) S(kLayerScalars, n)
#define LAYER_ARGS LY("context"), LY("core"), LY("cores"), LY("gelu"), LY("head_dim"), LY("heads"), LY("hidden"), \
                   LY("intermediate"), LY("kv_heads"), LY("post_norms"), LY("qk_norm"),                   \
                   LY("eps_bits"), LY("offset_bits"), LY("interleaved"), LY("scale_bits")
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
    scalar_names(kLayerScalars)                                                                                  \
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
#undef QK
#undef AT
#undef HD
#undef LY
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
  return run_core_programs(d, k, sim::stream_refs(streams), runtime);
}

// Each step resolved once: its FIFO as an id (no names compared per object), what kind of object
// it moves, its entry point and its scalars in the kernel's order.
enum class StepKind { Ddr, Act, Slice, Out, Other };
struct StepInfo {
  int id = -1;
  StepKind kind = StepKind::Other;
  const ObjectFifo* fifo = nullptr;
  const StageEntry* entry = nullptr;
  std::vector<int> operands;
  std::vector<int32_t> scalars;
  std::string unresolved;  // why the scalars could not be resolved (thrown if the step is called)
};

struct CorePrograms::Impl {
  const Design* d = nullptr;
  const StageKernel* k = nullptr;
  std::vector<const TileUse*> cores;
  std::vector<std::string> names;         // FIFO by id
  std::vector<std::vector<StepInfo>> info;  // per core, per step
  size_t slice = 0;                       // bytes of one core's slice of an exchange
};

CorePrograms::CorePrograms(const Design& d, const StageKernel& k, const StageScalars& runtime) {
  auto made = std::make_shared<Impl>();
  Impl& m = *made;
  m.d = &d;
  m.k = &k;
  m.cores = cores_in_order(d);
  const size_t P = m.cores.size();
  const ObjectFifo* slice0 = d.find_fifo("slice_c0r0");
  m.slice = slice0 ? size_t(slice0->elem_bytes) : 0;
  std::map<std::string, int> ids;
  const auto id_of = [&](const std::string& n) {
    auto [it, fresh] = ids.emplace(n, int(m.names.size()));
    if (fresh) m.names.push_back(n);
    return it->second;
  };
  m.info.resize(P);
  for (size_t p = 0; p < P; ++p) {
    const std::vector<CoreStep>& prog = m.cores[p]->program;
    m.info[p].resize(prog.size());
    for (size_t i = 0; i < prog.size(); ++i) {
      const CoreStep& s = prog[i];
      StepInfo& in = m.info[p][i];
      if (s.op == CoreOp::Acquire || s.op == CoreOp::Release) {
        in.id = id_of(s.name);
        in.kind = s.name.rfind("ddr_", 0) == 0 ? StepKind::Ddr
                  : s.name == "act"            ? StepKind::Act
                  : s.name.rfind("slice_", 0) == 0 && s.op == CoreOp::Release ? StepKind::Slice
                  : s.op == CoreOp::Release    ? StepKind::Out
                                               : StepKind::Other;
        if (s.op == CoreOp::Acquire) in.fifo = d.find_fifo(s.name);
      } else if (s.op == CoreOp::Call) {
        auto e = k.entries.find(s.name);
        if (e != k.entries.end()) in.entry = &e->second;
        for (const std::string& f : s.operands) in.operands.push_back(id_of(f));
        StageScalars merged = runtime;
        for (const auto& [name, v] : s.args) merged[name] = v;
        try {
          for (const std::string& n : k.scalars) in.scalars.push_back(scalar(merged, n.c_str()));
        } catch (const std::invalid_argument& e) {
          in.unresolved = e.what();
        }
      }
    }
  }
  // The L1 bounds are checked on the design's kernel args (what every Call passes).
  StageScalars bounds = runtime;
  for (const auto& [name, v] : m.cores[0]->kernel.args) bounds[name] = v;
  if (const std::string why = state_bounds(k.name, bounds); !why.empty())
    fail(d, k.name + " cannot run it: " + why);
  if (const std::vector<std::string> missing = scalars_beyond_program(d, k); !missing.empty()) {
    std::string names_missing;
    for (const std::string& n : missing) names_missing += (names_missing.empty() ? "" : ", ") + n;
    fail(d, "its kernel args lack " + names_missing + ", which " + k.name + " takes");
  }
  impl_ = std::move(made);
}

size_t CorePrograms::cores() const { return impl_->cores.size(); }
const Design& CorePrograms::design() const { return *impl_->d; }

std::map<std::string, std::vector<uint8_t>> run_core_programs(const Design& d, const StageKernel& k,
                                                              const sim::StreamRefs& streams,
                                                              const StageScalars& runtime, SimStreamCounts* counts) {
  return CorePrograms(d, k, runtime).run(streams, counts);
}

std::map<std::string, std::vector<uint8_t>> CorePrograms::run(const sim::StreamRefs& streams,
                                                              SimStreamCounts* counts) const {
  const Impl& m = *impl_;
  const Design& d = *m.d;
  const StageKernel& k = *m.k;
  const std::vector<const TileUse*>& cores = m.cores;
  const std::vector<std::string>& names = m.names;
  const std::vector<std::vector<StepInfo>>& info = m.info;
  const size_t P = cores.size(), slice = m.slice;
  using Kind = StepKind;
  if (streams.first.size() != P)
    fail(d, "has " + std::to_string(P) + " cores, got " + std::to_string(streams.first.size()) + " streams");
  // A held object: its buffer, or (a DDR object that is one piece of an argument) the argument's
  // bytes in place: the entry points take their DDR objects read-only (const).
  struct Held {
    std::vector<uint8_t> buf;
    uint8_t* ptr = nullptr;
  };
  struct Core {
    size_t pc = 0, ddr = 0, gives = 0, takes = 0;
    std::vector<std::array<int64_t, 3>> loops;  // first step, end, iterations left
    std::vector<Held> held;                     // by FIFO id
    std::vector<std::vector<uint8_t>> spare;    // released objects' buffers, reused by the next acquires
    std::shared_ptr<void> state;  // the core's L1 state, which its entry points reach (xk::core_state)
    // What the core did in this phase, merged in core order once every core has stopped.
    std::vector<std::pair<size_t, std::vector<uint8_t>>> gave;  // exchange round, its slice
    std::vector<std::vector<uint8_t>> put;                      // by output FIFO id: its objects
    std::vector<uint8_t*> objects;                              // a call's operands
    SimStreamCounts counts;
    bool progressed = false;
  };
  std::vector<Core> cs(P);
  for (Core& c : cs) c.state = k.fresh_state(), c.held.resize(names.size()), c.put.resize(names.size());
  std::vector<std::vector<uint8_t>> joined;  // per exchange round: every core's slice in order
  std::vector<size_t> given;                 // per exchange round: the cores that gave it
  std::vector<std::vector<uint8_t>> out_by_id(names.size());
  // Runs core p until its program ends or it waits for an exchange some core has not given by the
  // start of this phase. It reads `joined` and `given` and writes only its own Core.
  const auto run_core = [&](size_t p) {
    Core& c = cs[p];
    const std::vector<CoreStep>& prog = cores[p]->program;
    const std::vector<StepInfo>& steps = info[p];
    const auto next_step = [&] {  // unwinds finished loops; false when the program is done
      while (!c.loops.empty() && int64_t(c.pc) == c.loops.back()[1]) {
        if (--c.loops.back()[2] > 0) c.pc = size_t(c.loops.back()[0]);
        else c.loops.pop_back();
      }
      return c.pc < prog.size();
    };
    const auto waits = [&] {  // for an exchange some core has not given yet
      return prog[c.pc].op == CoreOp::Acquire && steps[c.pc].kind == Kind::Act &&
             (c.takes >= given.size() || given[c.takes] < P);
    };
    if (!next_step() || waits()) return;
    // The state the kernels' calls on this thread use: the called core's (unset again on return).
    struct Designate {
      explicit Designate(void* s) { xk::t_core_state = s; }
      ~Designate() { xk::t_core_state = nullptr; }
    } designate(c.state.get());
    for (;;) {
      if (!next_step()) break;
      const CoreStep& s = prog[c.pc];
      const StepInfo& in = steps[c.pc];
      if (s.op == CoreOp::Loop) {
        c.loops.push_back({int64_t(c.pc) + 1, int64_t(c.pc) + 1 + s.body, s.count});
      } else if (s.op == CoreOp::Acquire) {
        const ObjectFifo* f = in.fifo;
        if (!f) fail(d, "core " + to_string(cores[p]->at) + " acquires unknown FIFO " + s.name);
        if (in.kind == Kind::Act && waits()) break;  // for every core's slice
        Held& h = c.held[size_t(in.id)];
        if (h.ptr && h.buf.capacity()) c.spare.push_back(std::move(h.buf));  // overwritten unreleased
        h.buf = {};
        h.ptr = nullptr;
        const auto fresh = [&]() -> std::vector<uint8_t>& {  // a buffer of its own, reused
          if (!c.spare.empty()) h.buf = std::move(c.spare.back()), c.spare.pop_back();
          return h.buf;
        };
        if (in.kind == Kind::Ddr) {
          if (c.ddr >= streams.objects(p))
            fail(d, "core " + to_string(cores[p]->at) + " reads past its DDR stream");
          const uint8_t* whole = streams.whole(p, c.ddr);
          if (whole && f->elem_bytes <= kObj) {
            h.ptr = const_cast<uint8_t*>(whole);  // read-only: the DDR operands are const
            c.counts.in_place_bytes += kObj;
          } else {
            std::vector<uint8_t>& obj = fresh();
            obj.resize(std::max(size_t(f->elem_bytes), size_t(kObj)));
            streams.read(p, c.ddr, obj.data());
            obj.resize(size_t(f->elem_bytes));
            if (obj.size() > size_t(kObj)) std::memset(obj.data() + kObj, 0, obj.size() - size_t(kObj));
            h.ptr = obj.data();
            c.counts.gathered_bytes += kObj;
          }
          ++c.ddr;
        } else if (in.kind == Kind::Act) {
          fresh() = joined[c.takes];
          h.ptr = h.buf.data();
        } else {
          fresh().assign(size_t(f->elem_bytes), 0);
          h.ptr = h.buf.data();
        }
      } else if (s.op == CoreOp::Release) {
        Held& h = c.held[size_t(in.id)];
        if (in.kind == Kind::Slice) {
          c.gave.emplace_back(c.gives++, std::vector<uint8_t>(h.ptr, h.ptr + slice));
        } else if (in.kind == Kind::Act) {
          ++c.takes;
        } else if (in.kind == Kind::Out) {
          std::vector<uint8_t>& out = c.put[size_t(in.id)];
          out.insert(out.end(), h.buf.begin(), h.buf.end());
        }
        if (h.buf.capacity()) c.spare.push_back(std::move(h.buf));
        h.buf = {};
        h.ptr = nullptr;
      } else {
        if (!in.entry) fail(d, "calls " + s.name + ", which " + k.name + " does not define");
        if (!in.unresolved.empty()) throw std::invalid_argument(in.unresolved);
        c.objects.clear();
        for (size_t j = 0; j < in.operands.size(); ++j) {
          uint8_t* o = c.held[size_t(in.operands[j])].ptr;
          if (!o) fail(d, "core " + to_string(cores[p]->at) + " calls " + s.name + " on " + s.operands[j] +
                              ", which it does not hold");
          c.objects.push_back(o);
        }
        (*in.entry)(c.objects.data(), in.scalars.data());
      }
      ++c.pc;
      c.progressed = true;
    }
  };
  // Phases: every core runs until it waits for an exchange (the cores are independent between
  // exchanges, so a phase's cores run on the engine's threads), then the slices they gave join
  // their rounds and their outputs are appended, in core order: the same bytes in the same order
  // whichever thread ran which core.
  for (bool busy = true; busy;) {
    for (Core& c : cs) c.progressed = false;
    parallel_for(int64_t(P), 1, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) run_core(size_t(p));
    });
    busy = false;
    for (size_t p = 0; p < P; ++p) {
      Core& c = cs[p];
      busy = busy || c.progressed;
      for (auto& [round, bytes] : c.gave) {
        while (joined.size() <= round) joined.emplace_back(slice * P), given.push_back(0);
        std::memcpy(joined[round].data() + p * slice, bytes.data(), slice);
        ++given[round];
      }
      c.gave.clear();
      for (size_t id = 0; id < names.size(); ++id) {
        std::vector<uint8_t>& out = out_by_id[id];
        out.insert(out.end(), c.put[id].begin(), c.put[id].end());
        c.put[id].clear();
      }
    }
  }
  if (counts)
    for (const Core& c : cs) counts->in_place_bytes += c.counts.in_place_bytes, counts->gathered_bytes += c.counts.gathered_bytes;
  std::map<std::string, std::vector<uint8_t>> outputs;
  for (size_t i = 0; i < names.size(); ++i)
    if (!out_by_id[i].empty()) outputs[names[i]] = std::move(out_by_id[i]);
  for (size_t p = 0; p < P; ++p)
    if (cs[p].pc != cores[p]->program.size())
      fail(d, "core " + to_string(cores[p]->at) + " stalls at step " + std::to_string(cs[p].pc) + " of its program");
  return outputs;
}

CorePrograms design_programs(const Design& d, const SimKernelArgs& k) {
  return CorePrograms(d, stage_kernel(cores_in_order(d).front()->kernel.name), runtime_scalars(k));
}

void run_design_programs(const Design& d, HostArgs& args, const SimKernelArgs& k, SimStreamCounts* counts) {
  if (args.size() != d.args.size()) fail(d, "takes " + std::to_string(d.args.size()) + " host arguments");
  run_design_programs(design_programs(d, k), args, counts);
}

void run_design_programs(const CorePrograms& programs, HostArgs& args, SimStreamCounts* counts) {
  const Design& d = programs.design();
  if (args.size() != d.args.size()) fail(d, "takes " + std::to_string(d.args.size()) + " host arguments");
  const size_t P = programs.cores();
  std::map<std::string, std::vector<uint8_t>> out =
      programs.run(sim::core_stream_refs(d, args, int64_t(P)), counts);
  for (const char* fifo : {"result", "kv_new"})
    if (d.find_fifo(fifo)) drain(d, args, fifo, out[fifo]);
  // Joined outputs: column c drains [object][core][object bytes] of its cores' "out" FIFOs.
  for (size_t c = 0; c < P / kCores; ++c) {
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
