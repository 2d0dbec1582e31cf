// libFuzzer target: size, time and bandwidth strings ("64MiB", "2us", "400Gbps").
// Parsing never crashes; a value it accepts is finite and not negative; a size it
// accepts prints (format_size, for messages) without failing. Exact sizes round-trip:
// "N B" parses back to N.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "scenarios/units.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string why;
  int64_t bytes = 0;
  if (clustersim::parse_size(text, bytes, why)) {
    if (bytes < 0) __builtin_trap();
    if (clustersim::format_size(bytes).empty()) __builtin_trap();
    int64_t again = -1;
    if (!clustersim::parse_size(std::to_string(bytes) + "B", again, why) || again != bytes) __builtin_trap();
  }
  double seconds = 0;
  if (clustersim::parse_time(text, seconds, why) && (!std::isfinite(seconds) || seconds < 0)) __builtin_trap();
  double bw = 0;
  if (clustersim::parse_bandwidth(text, bw, why) && (!std::isfinite(bw) || bw < 0)) __builtin_trap();
  return 0;
}
