// libFuzzer target: the scenario loader on arbitrary bytes. Bad input must be an
// InputError (FILE:LINE:COL: error: ...); anything else — another exception, a crash, a
// hang, a sanitizer report — is a bug.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "scenarios/error.h"
#include "scenarios/scenario.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The input file, removed when the fuzzer exits.
  static const struct Input {
    std::string path = "/tmp/clustersim-fuzz-" + std::to_string(::getpid()) + ".yaml";
    ~Input() { std::remove(path.c_str()); }
  } input;
  const std::string& path = input.path;
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const clustersim::Scenario s = clustersim::load_scenario(path);
    (void)s;
  } catch (const clustersim::InputError& e) {
    const std::string what = e.what();
    if (what.find(": error: ") == std::string::npos) __builtin_trap();  // every error names where and what
  }
  return 0;
}
