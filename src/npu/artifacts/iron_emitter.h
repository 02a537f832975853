// Emits a design as input for the open toolchain (mlir-aie's IRON Python API), so the designs
// the simulator runs can be compiled into an xclbin + instruction stream on a machine that has
// the toolchain. One design -> one directory: design.py (the IRON program: workers, object FIFOs,
// memtile splits/joins, the runtime sequence) and a Makefile with the exact aiecc commands; the
// kernels are the pinned mlir-aie release's kernel library where it has them (docs/npu-toolchain.md).
#pragma once
#include <set>
#include <string>
#include <vector>

#include "npu/design.h"

namespace xdna::npu {

// The IRON program for `d` (Python source). Throws std::invalid_argument naming the kernel
// when a core runs a kernel the emitter has no mapping for.
std::string emit_iron(const Design& d);
// Sources of the design's kernels that mlir-aie's kernel library lacks and we have not written
// yet ("aie_kernels/<kernel>.cc"); the Makefile lists them on its "missing kernels" line.
std::vector<std::string> missing_kernels(const Design& d);
// Sources of the design's kernels that are ours and written ("aie_kernels/<kernel>.cc", each
// exporting extern "C" <kernel> as design.py calls it). npu: needs hardware and the toolchain,
// unverified here.
std::vector<std::string> kernel_sources(const Design& d);
// Every kernel name with a source in aie_kernels/.
const std::set<std::string>& written_kernels();
// Writes design.py, design.json and Makefile into `dir` (created); returns the file paths.
std::vector<std::string> emit_design_dir(const Design& d, const std::string& dir);

}  // namespace xdna::npu
