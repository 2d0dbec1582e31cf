// What every command shares: the usage error (exit 2) and reading a flag's value.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace clustersim {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The value after the flag at args[i] (i moves onto it); UsageError when there is none.
inline std::string need_value(const std::vector<std::string>& args, size_t& i) {
  if (i + 1 >= args.size()) throw UsageError(args[i] + " needs a value");
  return args[++i];
}

}  // namespace clustersim
