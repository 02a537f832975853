// A design is one NPU dispatch described as data: the tiles it uses, the buffers in each tile's
// memory, the object-FIFO links that move data between tiles (with memtile split/join), the
// kernel each core runs, and the runtime sequence of shim transfers the host issues per
// invocation. It is what an emitter would lower to an xclbin + instruction stream, what the
// validator checks against the AIE2P limits (device_model.h), and what the cost model times.
// JSON form: design_json.cpp; families of designs: design_families.h; docs/npu-designs.md.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/dtype.h"
#include "npu/device_model.h"

namespace xdna::npu {

struct TileCoord {
  int col = 0, row = 0;
  bool operator==(const TileCoord&) const = default;
  auto operator<=>(const TileCoord&) const = default;
};
std::string to_string(TileCoord t);  // "(col,row)"

// A buffer a core or memtile holds outside any FIFO (accumulators, lookup tables, constants).
struct Buffer {
  std::string name;
  int64_t bytes = 0;
  DType dtype = DType::F32;
};

// The kernel a core runs once per design invocation: the compiled function's name, its scalar
// arguments, and the work it does (what the cost model times).
struct Kernel {
  std::string name;
  DType dtype = DType::BF16;             // operand type of its inner loop
  std::map<std::string, int64_t> args;   // e.g. {"m", 64}, {"k", 64}, {"shift", 7}
  int64_t mmul_macs = 0;                 // MACs issued through aie::mmul
  int64_t vector_macs = 0;               // MACs issued as vector MACs (GEMV: one live mmul row)
  int64_t vector_ops = 0;                // other vector element-ops (norms, softmax, elementwise)
};

// One step of a core's program: the order in which the core takes and gives FIFO objects and
// calls its kernel's entry points per design invocation (the schedule npu-sim follows; the IRON
// emitter writes it as the worker body). Acquire / Release: one object of FIFO `name`. Call:
// entry point `name` with the objects acquired from the FIFOs in `operands` (in order), then
// `args` as int32 scalars in name order. Loop: the next `body` steps run `count` times.
enum class CoreOp : uint8_t { Acquire, Release, Call, Loop };
struct CoreStep {
  CoreOp op = CoreOp::Call;
  std::string name;
  std::vector<std::string> operands;
  std::map<std::string, int64_t> args;
  int64_t count = 1;
  int64_t body = 0;
};

struct TileUse {
  TileCoord at;
  std::vector<Buffer> buffers;
  bool has_kernel = false;  // compute tiles only
  Kernel kernel;
  // Empty: the core calls `kernel` once per object of its FIFOs (simple designs: the emitter
  // nests the FIFOs by object count). Fused designs spell their schedule out here.
  std::vector<CoreStep> program = {};
};

// One end of a FIFO: a DMA channel of a tile (producer: its MM2S channel, consumer: S2MM), or
// kSharedMemory: a consumer core in the same column on an adjacent row reads the producer's L1
// in place (no DMA channel or BD; only the lock pair). Assumption: aie2p.md does not list which
// neighbours share memory; AIE-ML cores share with their north and south neighbours.
inline constexpr int kSharedMemory = -1;
struct FifoEnd {
  TileCoord tile;
  int channel = 0;
};

// An object FIFO: a circular buffer of `depth` objects of `elem_bytes` at each non-shim end,
// moved from one producer to one or more consumers (several consumers = stream broadcast).
// `objects` is how many objects pass through per design invocation (the cost model's bytes).
struct ObjectFifo {
  std::string name;
  FifoEnd producer;
  std::vector<FifoEnd> consumers;
  int depth = 2;
  int64_t elem_bytes = 0;
  int64_t objects = 1;
};

// A memtile link (IRON object_fifo_link): objects arriving on `inputs` leave on `outputs`
// through one shared memtile buffer. Split: one input, several outputs, each output reading
// its slice at `offsets[i]` bytes of the input object. Join: several inputs, one output, input
// i written at `offsets[i]` bytes of the output object. Forward: one input, one output.
struct FifoLink {
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::vector<int64_t> offsets;
};

// One dimension of a DMA access pattern, in units of the pattern's elem_bytes.
struct Dim {
  int64_t size = 1;
  int64_t stride = 1;
};

// n-d access pattern over a host buffer (mlir-aie dma_memcpy_nd): dims[0] is the innermost,
// the address of index (i0, i1, i2) is offset + i0*stride0 + i1*stride1 + i2*stride2 elements;
// the whole pattern runs `repeat` times. Limits: device_model.h (in 32-bit words).
struct AccessPattern {
  int64_t elem_bytes = 4;
  int64_t offset = 0;
  std::vector<Dim> dims;
  int64_t repeat = 1;
  int64_t bytes() const;  // bytes moved, repeats included
};

// A host buffer passed to the design (an XRT buffer object argument).
struct HostArg {
  std::string name;
  int64_t bytes = 0;
};

// One step of the runtime sequence. Fill: shim reads `arg` with `pattern` into the FIFO whose
// producer is a shim. Drain: shim writes the FIFO (consumer is a shim) to `arg`. Wait: block
// until every transfer issued so far on `fifo`'s shim channel has completed.
enum class SeqOp : uint8_t { Fill, Drain, Wait };
struct SeqStep {
  SeqOp op = SeqOp::Fill;
  std::string fifo;
  int arg = 0;
  AccessPattern pattern;
};

struct Design {
  std::string name;    // unique per parameterisation, e.g. "gemv_bf16_3072x1024_c8"
  std::string family;  // e.g. "gemv"
  std::map<std::string, int64_t> params;
  std::vector<TileUse> tiles;
  std::vector<ObjectFifo> fifos;
  std::vector<FifoLink> links;
  std::vector<HostArg> args;
  std::vector<SeqStep> sequence;

  const ObjectFifo* find_fifo(const std::string& name) const;
  const TileUse* find_tile(TileCoord at) const;
};

// Throws std::invalid_argument whose message names the design, the resource (tile coordinate,
// buffer, FIFO, channel, BD pool, lock pool, sequence step) and the limit it exceeds.
void validate_design(const Design& d);

// Bytes each tile's memory holds: its buffers plus every FIFO end it holds (depth x elem_bytes;
// a memtile link holds one shared buffer: the larger of its input and output sides).
int64_t tile_memory_bytes(const Design& d, TileCoord at);

// JSON (design_json.cpp). from_json validates the structure (field types, known enum names);
// call validate_design for the hardware limits.
nlohmann::json design_to_json(const Design& d);
Design design_from_json(const nlohmann::json& j);
void save_design(const Design& d, const std::string& path);
Design load_design(const std::string& path);

std::string_view seq_op_name(SeqOp op);
std::string_view core_op_name(CoreOp op);
// Checks a core program's structure: loops close inside the program, every Acquire is released
// before the program ends, Calls name acquired FIFOs. Throws std::invalid_argument naming the step.
void check_core_program(const std::string& design, const TileUse& t);

}  // namespace xdna::npu
