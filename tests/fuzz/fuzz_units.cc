// libFuzzer target: size, time and bandwidth strings ("64MiB", "2us", "400Gbps").
// Parsing never crashes; a value it accepts is finite and not negative; a size it
// accepts prints (format_size, for messages) without failing. Exact sizes round-trip:
// "N B" parses back to N.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "scenarios/units.h"

namespace {
// Names the input and the broken property before stopping, so a CI log shows both.
[[noreturn]] void fail(std::string_view text, const char* what) {
  std::fprintf(stderr, "fuzz_units: %s for input \"", what);
  for (unsigned char c : text) std::fprintf(stderr, c >= 32 && c < 127 ? "%c" : "\\x%02x", c);
  std::fprintf(stderr, "\"\n");
  __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string why;
  int64_t bytes = 0;
  if (clustersim::parse_size(text, bytes, why)) {
    if (bytes < 0) fail(text, "negative size");
    if (clustersim::format_size(bytes).empty()) fail(text, "empty format_size");
    int64_t again = -1;
    if (!clustersim::parse_size(std::to_string(bytes) + "B", again, why) || again != bytes)
      fail(text, "size does not round-trip through N B");
  }
  double seconds = 0;
  if (clustersim::parse_time(text, seconds, why) && (!std::isfinite(seconds) || seconds < 0))
    fail(text, "time not finite or negative");
  double bw = 0;
  if (clustersim::parse_bandwidth(text, bw, why) && (!std::isfinite(bw) || bw < 0))
    fail(text, "bandwidth not finite or negative");
  return 0;
}
