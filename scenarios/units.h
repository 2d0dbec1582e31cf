// Unit strings, parsed once at the edge. Sizes: "64MiB", "1GiB", "512KB", "4096"
// (bytes). Times: "5us", "2ms", "1.5s", "800ns", "10ps" (a unit is required).
// Bandwidths: "400Gbps" (bits/s), "450GB/s" or "450GBps" (bytes/s) (a unit is required).
// Decimal prefixes (K, M, G, T) are powers of 1000, binary ones (Ki, Mi, Gi, Ti) of 1024.
// Each parser returns false and fills `why` on bad input; it never throws.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace clustersim {

// Documented ranges, checked as each value is read, so that every quantity that becomes
// picoseconds or bytes stays far inside int64 in the arithmetic that follows:
// sizes 0 .. 1 PiB, times 0 .. 1e6 s, bandwidths 1 Mbit/s .. 1 PB/s.
inline constexpr double kMaxSizeBytes = 1125899906842624.0;  // 2^50
inline constexpr double kMaxTimeSeconds = 1e6;
inline constexpr double kMinBandwidth = 125e3;  // bytes/s: 1 Mbit/s
inline constexpr double kMaxBandwidth = 1e15;   // bytes/s
bool parse_size(std::string_view text, int64_t& bytes, std::string& why);
bool parse_time(std::string_view text, double& seconds, std::string& why);
bool parse_bandwidth(std::string_view text, double& bytes_per_s, std::string& why);
// Wall-clock spans of a cluster's life (MTBFs, training durations, restart times):
// "50000h", "10min", "24h", "2d", "90s"; 0 .. 1e12 s (about 31,700 years).
inline constexpr double kMaxDurationSeconds = 1e12;
bool parse_duration(std::string_view text, double& seconds, std::string& why);

// "1.5 GiB", "64 KiB", "512 B": the largest binary unit that keeps the value >= 1.
std::string format_size(int64_t bytes);

}  // namespace clustersim
