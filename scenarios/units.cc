#include "scenarios/units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>

namespace clustersim {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits "12.5GiB" into 12.5 and "GiB". Rejects empty numbers, signs other than a
// leading '-', exponents without digits, NaN and infinities.
bool split_number(std::string_view text, double& value, std::string_view& unit, std::string& why) {
  text = trim(text);
  size_t i = 0;
  if (i < text.size() && (text[i] == '-' || text[i] == '+')) ++i;
  size_t digits = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    if (text[i] != '.') ++digits;
    ++i;
  }
  if (digits == 0) {
    why = "'" + std::string(text) + "' does not start with a number";
    return false;
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E') && i + 1 < text.size() &&
      (std::isdigit(static_cast<unsigned char>(text[i + 1])) ||
       ((text[i + 1] == '-' || text[i + 1] == '+') && i + 2 < text.size() &&
        std::isdigit(static_cast<unsigned char>(text[i + 2]))))) {
    i += 2;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  }
  std::string number(text.substr(0, i));
  char* end = nullptr;
  value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(value)) {
    why = "'" + std::string(text) + "' is not a valid number";
    return false;
  }
  unit = trim(text.substr(i));
  return true;
}

// Multiplier of a decimal or binary prefix at the start of `unit`; advances past it.
double prefix(std::string_view& unit) {
  static constexpr struct {
    std::string_view p;
    double f;
  } kPrefixes[] = {{"Ki", 1024.0},
                   {"Mi", 1024.0 * 1024},
                   {"Gi", 1024.0 * 1024 * 1024},
                   {"Ti", 1024.0 * 1024 * 1024 * 1024},
                   {"Pi", 1024.0 * 1024 * 1024 * 1024 * 1024},
                   {"K", 1e3},
                   {"k", 1e3},
                   {"M", 1e6},
                   {"G", 1e9},
                   {"T", 1e12},
                   {"P", 1e15}};
  for (const auto& p : kPrefixes) {
    if (unit.size() > p.p.size() && unit.substr(0, p.p.size()) == p.p) {
      unit.remove_prefix(p.p.size());
      return p.f;
    }
  }
  return 1.0;
}

}  // namespace

bool parse_size(std::string_view text, int64_t& bytes, std::string& why) {
  double v = 0;
  std::string_view unit;
  if (!split_number(text, v, unit, why)) return false;
  double f = 1.0;
  if (!unit.empty()) {
    f = prefix(unit);
    if (unit != "B") {
      why = "unknown size unit in '" + std::string(trim(text)) +
            "', expected B, KB, KiB, MB, MiB, GB, GiB, TB, TiB, PB or PiB";
      return false;
    }
  }
  double b = v * f;
  if (b < 0) {
    why = "size '" + std::string(trim(text)) + "' is negative";
    return false;
  }
  if (b > kMaxSizeBytes) {  // 1 PiB: past every memory and message; byte products stay within int64
    why = "size '" + std::string(trim(text)) + "' is out of range, expected at most 1024TiB";
    return false;
  }
  if (b != std::floor(b)) {
    why = "size '" + std::string(trim(text)) + "' is not a whole number of bytes";
    return false;
  }
  bytes = static_cast<int64_t>(b);
  return true;
}

namespace {

struct TimeUnit {
  std::string_view u;
  double f;
};

// A number with one of `units`, as seconds in [0, max]; `noun` ("time", "duration") and
// the messages' expectations name what the caller reads.
bool parse_seconds(std::string_view text, std::span<const TimeUnit> units, double max, std::string_view noun,
                   std::string_view range, std::string_view no_unit, std::string_view known, double& seconds,
                   std::string& why) {
  double v = 0;
  std::string_view unit;
  if (!split_number(text, v, unit, why)) return false;
  const std::string quoted = "'" + std::string(trim(text)) + "'";
  for (const TimeUnit& u : units) {
    if (unit != u.u) continue;
    if (v < 0) {
      why = std::string(noun) + " " + quoted + " is negative";
      return false;
    }
    if (!std::isfinite(v * u.f) || v * u.f > max) {
      why = std::string(noun) + " " + quoted + " is out of range, expected " + std::string(range);
      return false;
    }
    seconds = v * u.f;
    return true;
  }
  why = unit.empty() ? std::string(noun) + " " + quoted + " has no unit, expected " + std::string(no_unit)
                     : "unknown " + std::string(noun) + " unit in " + quoted + ", expected " + std::string(known);
  return false;
}

}  // namespace

bool parse_time(std::string_view text, double& seconds, std::string& why) {
  static constexpr TimeUnit kUnits[] = {{"ps", 1e-12}, {"ns", 1e-9}, {"us", 1e-6}, {"µs", 1e-6},
                                        {"μs", 1e-6},  {"ms", 1e-3}, {"s", 1.0},   {"min", 60.0}};
  // Picoseconds of a run stay within int64.
  return parse_seconds(text, kUnits, kMaxTimeSeconds, "time", "at most 1e6 s (11.6 days)",
                       "ps, ns, us, ms or s (e.g. 2us)", "ps, ns, us, ms or s", seconds, why);
}

bool parse_duration(std::string_view text, double& seconds, std::string& why) {
  static constexpr TimeUnit kUnits[] = {{"ms", 1e-3}, {"s", 1.0}, {"min", 60.0}, {"h", 3600.0}, {"d", 86400.0}};
  return parse_seconds(text, kUnits, kMaxDurationSeconds, "duration", "at most 1e12 s", "s, min, h or d (e.g. 24h)",
                       "ms, s, min, h or d", seconds, why);
}

bool parse_bandwidth(std::string_view text, double& bytes_per_s, std::string& why) {
  double v = 0;
  std::string_view unit;
  if (!split_number(text, v, unit, why)) return false;
  std::string_view u = unit;
  double f = prefix(u);
  double per = 0;
  if (u == "bps" || u == "b/s" || u == "bit/s")
    per = 1.0 / 8.0;
  else if (u == "Bps" || u == "B/s")
    per = 1.0;
  if (per == 0) {
    why = unit.empty() ? "bandwidth '" + std::string(trim(text)) + "' has no unit, expected e.g. 400Gbps or 450GB/s"
                       : "unknown bandwidth unit in '" + std::string(trim(text)) +
                             "', expected bps or B/s with a prefix (e.g. 400Gbps, 450GB/s)";
    return false;
  }
  if (v <= 0) {
    why = "bandwidth '" + std::string(trim(text)) + "' must be positive";
    return false;
  }
  if (!std::isfinite(v * f * per) || v * f * per < kMinBandwidth || v * f * per > kMaxBandwidth) {
    why = "bandwidth '" + std::string(trim(text)) + "' is out of range, expected 1Mbps to 1PB/s";
    return false;
  }
  bytes_per_s = v * f * per;
  return true;
}

std::string format_size(int64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (v == std::floor(v))
    std::snprintf(buf, sizeof buf, "%.0f %s", v, kUnits[u]);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
  return buf;
}

}  // namespace clustersim
