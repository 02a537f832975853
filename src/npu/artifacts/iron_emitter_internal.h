// What the IRON emitter's two files share (iron_emitter.cpp: design.py's frame, FIFOs, runtime
// sequence and Makefile; iron_worker_bodies.cpp: the core workers' bodies): Python names and
// types, the Worker line, and the body emitters.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "npu/design.h"

namespace xdna::npu::iron {

// The int32 bit pattern of an f32 (how design.py passes f32 model parameters).
int64_t f32_bits(float f);
// `s` as a Python identifier that no keyword or name of design.py's own takes.
std::string py_ident(const std::string& s);
// A core's Worker line (stack size from its "stack" buffer; its other L1 buffers noted); returns
// the worker's variable name.
std::string emit_worker(std::ostream& o, const TileUse& t, const std::string& fn, const std::string& args,
                        const char* buffers_are = "the kernel's own");
// The numpy type of an n-byte FIFO object.
std::string bytes_type(int64_t n);

// The FIFOs each core touches, in design order.
struct CoreIo {
  std::vector<const ObjectFifo*> consumes, produces;
};

// One kernel call inside a worker: the FIFO objects it receives, in order.
struct Call {
  std::vector<const ObjectFifo*> fifos;
};

// The worker's body, and the calls it makes (each needs a Kernel declaration of its own
// signature). FIFOs passing one object per invocation are acquired around everything; the
// others nest by object count when each count divides the next (gemv, gemm, streams: exact);
// when they do not (fused designs), each count gets its own loop and its own kernel entry point,
// in design order, and the kernel to be written defines what each stage does.
std::vector<Call> emit_worker_body(std::ostringstream& o, const std::string& fn, const CoreIo& io,
                                   const std::vector<std::string>& kernel_params,
                                   const std::vector<std::pair<std::string, int64_t>>& scalar_args,
                                   const std::string& zero_param,
                                   const std::vector<std::pair<std::string, std::string>>& runtime);

// A core with a program (design.h CoreStep): the worker body is the program, step by step:
// acquire / release one object, call an entry point on the acquired objects with its int32
// scalars (name order, then the runtime constants), loops as range_. Returns each entry point
// called, with its argument types, in first-call order.
std::vector<std::pair<std::string, std::string>> emit_program_body(
    std::ostringstream& o, const std::string& design, const std::string& fn, const TileUse& t, const CoreIo& io,
    const std::vector<std::pair<std::string, std::string>>& runtime);

// An encoder attention core (design_families_encoder.cpp) runs the units of its column in the
// order npu-sim runs them (encoder_attention_units): per unit, take its query rows, clear the
// running max / sum / output, one call per K/V block its rows can see (key position b * kv_block),
// then write the normalised rows into an output object. The units differ in their numbers, so
// the body loops over them in Python (unrolled when IRON traces the worker: a long sequence
// grows the core's program memory; aiecc reports it if it overflows). m, l, o and scores are the
// core's own L1 (LocalBuffer). Writes the kernel handles once (`declared`); returns the worker.
std::string emit_encoder_attention_worker(std::ostringstream& o, const Design& d, const TileUse& t,
                                          std::map<std::string, std::string>& var, bool& declared);

// How many kernel calls a core's body makes (see emit_worker_body).
size_t call_count(const CoreIo& io);

}  // namespace xdna::npu::iron
