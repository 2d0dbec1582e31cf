// SimTime: the one time type of the engine. Integer picoseconds, so every run is
// bit-for-bit reproducible; cost models may compute in double and convert once,
// with explicit rounding, at the point where an event is scheduled.
#pragma once

#include <cmath>
#include <compare>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

namespace clustersim {

class SimTime {
 public:
  constexpr SimTime() = default;

  static constexpr SimTime ps(int64_t v) { return SimTime(v); }
  static constexpr SimTime ns(int64_t v) { return SimTime(v * 1000); }
  static constexpr SimTime us(int64_t v) { return SimTime(v * 1000'000); }
  static constexpr SimTime ms(int64_t v) { return SimTime(v * 1000'000'000); }
  static constexpr SimTime s(int64_t v) { return SimTime(v * 1000'000'000'000); }
  static constexpr SimTime zero() { return SimTime(0); }
  static constexpr SimTime max() { return SimTime(std::numeric_limits<int64_t>::max()); }

  // Round-to-nearest conversion from seconds; the single place doubles become time.
  // Throws std::overflow_error past ±9.2e6 s (int64 picoseconds): a cost that large is a
  // failure to report, never a wrapped, negative time.
  static SimTime from_seconds(double seconds) {
    if (!(std::fabs(seconds) < 9.2e6))
      throw std::overflow_error("a simulated time of " + std::to_string(seconds) +
                                " s is past what int64 picoseconds hold (9.2e6 s)");
    return SimTime(static_cast<int64_t>(std::llround(seconds * 1e12)));
  }

  constexpr int64_t picoseconds() const { return ps_; }
  constexpr double seconds() const { return static_cast<double>(ps_) * 1e-12; }
  constexpr double microseconds() const { return static_cast<double>(ps_) * 1e-6; }

  constexpr SimTime operator+(SimTime o) const {
    int64_t sum = 0;
    if (__builtin_add_overflow(ps_, o.ps_, &sum)) throw std::overflow_error("simulated time past int64 picoseconds");
    return SimTime(sum);
  }
  constexpr SimTime operator-(SimTime o) const { return SimTime(ps_ - o.ps_); }
  constexpr SimTime& operator+=(SimTime o) {
    ps_ += o.ps_;
    return *this;
  }
  constexpr SimTime operator*(int64_t k) const { return SimTime(ps_ * k); }
  constexpr auto operator<=>(const SimTime&) const = default;

 private:
  constexpr explicit SimTime(int64_t v) : ps_(v) {}
  int64_t ps_ = 0;
};

}  // namespace clustersim
