// SimTime: the one time type of the engine. Integer picoseconds, so every run is
// bit-for-bit reproducible; cost models may compute in double and convert once,
// with explicit rounding, at the point where an event is scheduled.
#pragma once

#include <cmath>
#include <compare>
#include <cstdint>
#include <limits>

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
  static SimTime from_seconds(double seconds) { return SimTime(static_cast<int64_t>(std::llround(seconds * 1e12))); }

  constexpr int64_t picoseconds() const { return ps_; }
  constexpr double seconds() const { return static_cast<double>(ps_) * 1e-12; }
  constexpr double microseconds() const { return static_cast<double>(ps_) * 1e-6; }

  constexpr SimTime operator+(SimTime o) const { return SimTime(ps_ + o.ps_); }
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
