// xclbin (AXLF) parser on arbitrary bytes: must throw std::invalid_argument or parse, never
// crash, over-read or leak. What parses must also survive write() and parse back to the same
// content (the writer accepts everything the parser produces).
#include <cstdint>
#include <cstdlib>
#include <stdexcept>

#include "npu/artifacts/xclbin.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace xc = xdna::npu::xclbin;
  xc::Xclbin x;
  try {
    x = xc::parse(std::span<const uint8_t>(data, size));
  } catch (const std::invalid_argument&) {
    return 0;
  }
  for (const xc::Ip& ip : x.ips) (void)(ip.is_dpu_kernel() && x.pdi_for_kernel(ip.kernel_id()));
  const xc::Xclbin y = xc::parse(xc::write(x));  // throws (and so fails the run) if it cannot
  if (y.uuid != x.uuid || y.timestamp != x.timestamp || y.metadata_xml != x.metadata_xml || y.ips != x.ips ||
      y.partition != x.partition)
    std::abort();
  return 0;
}
