// Per-thread scratch that the conv drivers keep between calls (thread_local owners): grown when
// a call needs more, never shrunk, so steady-state inference allocates nothing.
#pragma once
#include <cstddef>
#include <memory>

#include "core/buffer.h"

namespace xdna::host {

// buf's memory as floats, reallocated first when it holds fewer than `bytes` (contents are not
// kept across a reallocation: callers overwrite what they read).
inline float* grown_scratch(std::unique_ptr<HeapBuffer>& buf, size_t bytes) {
  if (!buf || buf->size() < bytes) {
    buf.reset();  // free the old block before taking a larger one
    buf = std::make_unique<HeapBuffer>(bytes);
  }
  return reinterpret_cast<float*>(buf->data());
}

}  // namespace xdna::host
