#include "reports/summary.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace clustersim {

std::string format_number(double v) {
  if (!std::isfinite(v)) return "null";
  if (v == std::floor(v) && std::fabs(v) < 9.0e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, ec == std::errc() ? p : buf);
}

std::string json_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

std::string summary_json(const std::vector<std::pair<std::string, std::string>>& strings, const Metrics& metrics) {
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : strings) {
    out += (first ? "\"" : ", \"") + json_escape(k) + "\": \"" + json_escape(v) + "\"";
    first = false;
  }
  for (const auto& [k, v] : metrics) {
    out += (first ? "\"" : ", \"") + json_escape(k) + "\": " + format_number(v);
    first = false;
  }
  return out + "}";
}

}  // namespace clustersim
