#include "scenarios/readers.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "scenarios/units.h"

namespace clustersim {

const std::string& scalar(const YNode& n, const std::string& key, const char* expected) {
  if (n.kind != YNode::Kind::Scalar) throw InputError(n.mark, key + " must be " + expected + ", got " + n.kind_name());
  return n.scalar;
}

std::string as_path(const YNode& n, const std::string& key) {
  const std::filesystem::path p(scalar(n, key, "a path"));
  const std::string& from = n.mark.file;
  if (p.is_relative() && !from.empty() && from.rfind("--set", 0) != 0)
    return (std::filesystem::path(from).parent_path() / p).string();
  return p.string();
}

bool parse_integer(const std::string& s, int64_t& v) {
  const char* first = s.data() + (s.size() > 1 && s[0] == '+' && s[1] != '-' ? 1 : 0);
  const auto [p, ec] = std::from_chars(first, s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}

bool parse_decimal(const std::string& s, double& v) {
  if (s.empty() || s.find_first_not_of("0123456789.eE+-") != std::string::npos) return false;
  char* end = nullptr;
  v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(v);
}

int64_t as_int(const YNode& n, const std::string& key, int64_t min, int64_t max) {
  const std::string& s = scalar(n, key, "an integer");
  int64_t v = 0;
  if (!parse_integer(s, v)) throw InputError(n.mark, key + " must be an integer, got '" + s + "'");
  if (v < min)
    throw InputError(
        n.mark, key + " must be " + (min == 1 ? std::string("positive") : ">= " + std::to_string(min)) + ", got " + s);
  if (v > max) throw InputError(n.mark, key + " = " + s + " is out of range, expected at most " + std::to_string(max));
  return v;
}

std::vector<int64_t> int_list(const YNode& n, const std::string& key, int64_t min, int64_t max) {
  if (n.kind == YNode::Kind::Scalar) return {as_int(n, key, min, max)};
  if (n.kind != YNode::Kind::Seq) throw InputError(n.mark, key + " must be a list of integers, got " + n.kind_name());
  std::vector<int64_t> out;
  for (const YNode& v : n.seq) out.push_back(as_int(v, key, min, max));
  return out;
}
int as_count(const YNode& n, const std::string& key) { return static_cast<int>(as_int(n, key, 1, kMaxCount)); }
int64_t as_degree(const YNode& n, const std::string& key) { return as_int(n, key, 1, kMaxCount); }

namespace {
// A bound as a person writes it: 0, 1e-06, 100000 (std::to_string gives 0.000000).
std::string bound_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
}  // namespace

double as_double(const YNode& n, const std::string& key, double min, bool exclusive) {
  const std::string& s = scalar(n, key, "a number");
  double v = 0;
  if (!parse_decimal(s, v)) throw InputError(n.mark, key + " must be a number, got '" + s + "'");
  if (exclusive ? v <= min : v < min)
    throw InputError(n.mark, key + " must be " + (exclusive ? "> " : ">= ") + bound_text(min) + ", got " + s);
  return v;
}

double as_number(const YNode& n, const std::string& key, double lo, double hi) {
  const double v = as_double(n, key, lo, false);
  if (v > hi) throw InputError(n.mark, key + " must be at most " + bound_text(hi) + ", got " + n.scalar);
  return v;
}

bool as_bool(const YNode& n, const std::string& key) {
  const std::string& s = scalar(n, key, "true or false");
  if (s == "true") return true;
  if (s == "false") return false;
  throw InputError(n.mark, key + " must be true or false, got '" + s + "'");
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
  return out;
}

std::string as_enum(const YNode& n, const std::string& key, const std::vector<std::string>& options) {
  const std::string& s = scalar(n, key, "a name");
  if (std::find(options.begin(), options.end(), s) == options.end())
    throw InputError(n.mark, "unknown " + key + " '" + s + "', expected one of: " + join(options));
  return s;
}

double as_time(const YNode& n, const std::string& key) {
  std::string why;
  double v = 0;
  if (!parse_time(scalar(n, key, "a time such as 2us"), v, why)) throw InputError(n.mark, key + ": " + why);
  return v;
}

double at_most_a_second(double seconds, const YNode& n, const std::string& key) {
  if (seconds > 1.0)
    throw InputError(n.mark, key + " is " + n.scalar +
                                 ", expected at most 1s (a cost paid per kernel, host step, transfer or iteration)");
  return seconds;
}

double as_latency(const YNode& n, const std::string& key) { return at_most_a_second(as_time(n, key), n, key); }

double as_duration(const YNode& n, const std::string& key) {
  std::string why;
  double v = 0;
  if (!parse_duration(scalar(n, key, "a duration such as 24h"), v, why)) throw InputError(n.mark, key + ": " + why);
  return v;
}

double as_positive_duration(const YNode& n, const std::string& key) {
  const double v = as_duration(n, key);
  if (v <= 0) throw InputError(n.mark, key + " must be longer than 0, got '" + n.scalar + "'");
  return v;
}

int64_t as_size(const YNode& n, const std::string& key) {
  std::string why;
  int64_t v = 0;
  if (!parse_size(scalar(n, key, "a size such as 4GiB"), v, why)) throw InputError(n.mark, key + ": " + why);
  return v;
}

double as_bandwidth(const YNode& n, const std::string& key) {
  std::string why;
  double v = 0;
  if (!parse_bandwidth(scalar(n, key, "a bandwidth such as 400Gbps"), v, why))
    throw InputError(n.mark, key + ": " + why);
  return v;
}

DType as_dtype(const YNode& n, const std::string& key) {
  DType d;
  const std::string& s = scalar(n, key, "a dtype");
  if (!parse_dtype(s, d))
    throw InputError(n.mark, "unknown " + key + " '" + s + "', expected one of: fp32, bf16, fp16, fp8, int8, int4");
  return d;
}

}  // namespace clustersim
