// What every command shares: the usage error (exit 2) and reading a flag's value.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "scenarios/error.h"

namespace clustersim {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The value after the flag at args[i] (i moves onto it); UsageError when there is none.
// The value after the flag at args[i]; UsageError when there is none, or when what follows is
// another flag (`--out --json` had written a file named --json; ./--json names one).
inline std::string need_value(const std::vector<std::string>& args, size_t& i) {
  if (i + 1 >= args.size()) throw UsageError(args[i] + " needs a value");
  if (args[i + 1].size() > 2 && args[i + 1].compare(0, 2, "--") == 0)
    throw UsageError(args[i] + " needs a value, got the flag " + args[i + 1]);
  return args[++i];
}

// A flag that takes one value given twice is a usage error, not the last one silently kept
// (`-j` counts as `--jobs`). Flags only: need_value refuses a value that starts with "--".
inline void refuse_repeated(const std::vector<std::string>& args, std::initializer_list<const char*> flags) {
  for (const char* flag : flags) {
    const std::string f = flag;
    const auto n = std::count_if(args.begin(), args.end(),
                                 [&](const std::string& a) { return a == f || (f == "--jobs" && a == "-j"); });
    if (n > 1) throw UsageError(f + " given twice, expected it once");
  }
}

// The integer after the flag at args[i], from `lo` to `hi`; UsageError otherwise.
inline int64_t need_int(const std::vector<std::string>& args, size_t& i, const std::string& flag, int64_t lo,
                        int64_t hi) {
  const std::string v = need_value(args, i);
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE || n < lo || n > hi)
    throw UsageError(flag + " expects an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + ", got '" +
                     v + "'");
  return n;
}

// The integer after the flag at args[i], from 1 to `max`; UsageError otherwise.
inline int64_t need_count(const std::vector<std::string>& args, size_t& i, const std::string& flag, int64_t max) {
  return need_int(args, i, flag, 1, max);
}

// Refuses a --set pair whose key is one of `keys` or under one (KEY or KEY.*): a setting the
// command would not use, said instead of dropped. `why` completes "KEY <why>".
inline void refuse_sets(const std::vector<std::string>& sets, std::initializer_list<const char*> keys,
                        const std::string& why) {
  for (const std::string& set : sets) {
    const std::string key = set.substr(0, set.find('='));
    for (const char* k : keys) {
      const std::string p = k;
      if (key == p || key.rfind(p + ".", 0) == 0) throw InputError(SourceMark{"--set", 0, 0}, key + " " + why);
    }
  }
}

// `--timing ops | stream` after the flag at args[i]: true for ops (an event pair around
// every op of a real run), false for stream (none between ops); UsageError otherwise.
inline bool need_timing(const std::vector<std::string>& args, size_t& i) {
  const std::string v = need_value(args, i);
  if (v == "ops") return true;
  if (v == "stream") return false;
  throw UsageError("--timing expects ops (an event pair around every op) or stream (none between ops), got '" + v +
                   "'");
}

}  // namespace clustersim
