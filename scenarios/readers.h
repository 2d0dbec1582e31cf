// Typed readers of YAML values: each checks a value's kind, form and range and throws
// InputError at the value's position, naming the key and what was expected.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "scenarios/yaml_tree.h"
#include "topology/dtype.h"

namespace clustersim {

// Counts of hardware (nodes, GPUs, NICs): a million of anything is past every machine.
inline constexpr int64_t kMaxCount = 1 << 20;
// Model dimensions stay far below what would overflow FLOP and byte counts.
inline constexpr int64_t kMaxModelDim = int64_t{1} << 24;

const std::string& scalar(const YNode& n, const std::string& key, const char* expected);
// A path key's value, resolved as the keys' docs say: a relative path written in a file (a
// scenario, an include, a sweep: list) is relative to that file's folder; one given on the
// command line (--set) is relative to the working directory.
std::string as_path(const YNode& n, const std::string& key);
// Numbers as YAML writes them, for a scenario's keys and the files they name (a request
// trace): an integer is an optional sign and digits (a leading + too); a decimal is
// decimal notation, finite (strtod alone would also take hex such as 0x10, inf and nan).
bool parse_integer(const std::string& s, int64_t& v);
bool parse_decimal(const std::string& s, double& v);
int64_t as_int(const YNode& n, const std::string& key, int64_t min, int64_t max = INT64_MAX);
std::vector<int64_t> int_list(const YNode& n, const std::string& key, int64_t min, int64_t max);
int as_count(const YNode& n, const std::string& key);
int64_t as_degree(const YNode& n, const std::string& key);
double as_double(const YNode& n, const std::string& key, double min, bool exclusive);
double as_number(const YNode& n, const std::string& key, double lo, double hi);  // in [lo, hi]
bool as_bool(const YNode& n, const std::string& key);
std::string join(const std::vector<std::string>& v);  // "a, b, c"
std::string as_enum(const YNode& n, const std::string& key, const std::vector<std::string>& options);
double as_time(const YNode& n, const std::string& key);
// A time paid on every kernel, host step, transfer or iteration (a link's latency, a profile's
// launch costs): at most 1 s, where millions of them would overflow the simulated clock.
double at_most_a_second(double seconds, const YNode& n, const std::string& key);
double as_latency(const YNode& n, const std::string& key);  // as_time, then at_most_a_second
double as_duration(const YNode& n, const std::string& key);
double as_positive_duration(const YNode& n, const std::string& key);
int64_t as_size(const YNode& n, const std::string& key);
double as_bandwidth(const YNode& n, const std::string& key);
DType as_dtype(const YNode& n, const std::string& key);

}  // namespace clustersim
