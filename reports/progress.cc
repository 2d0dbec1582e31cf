#include "reports/progress.h"

#include <unistd.h>

#include <cstdio>

namespace clustersim {

Progress::Progress(std::string label, int64_t total, bool enabled)
    : label_(std::move(label)),
      total_(total),
      enabled_(enabled),
      tty_(::isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_line_(start_) {}

Progress::~Progress() { finish(); }

void Progress::tick(const std::string& what) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  ++done_;
  draw(what);
}

void Progress::update(int64_t done, int64_t total) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  done_ = done;
  total_ = total;
  draw("");
}

void Progress::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_ || finished_) return;
  finished_ = true;
  if (drawn_ && tty_) {
    std::fprintf(stderr, "\n");
  } else if (drawn_ && done_ != total_) {
    draw("");
  }
}

void Progress::draw(const std::string& what) {
  if (total_ <= 0) return;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  if (elapsed < 1.0) return;  // quick work shows nothing
  drawn_ = true;
  const double eta = done_ > 0 ? elapsed * static_cast<double>(total_ - done_) / static_cast<double>(done_) : 0;
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(done_ * kWidth / total_);
    std::fprintf(stderr, "\r%s [%s%s] %lld/%lld  %.0fs left  %-40.40s", label_.c_str(),
                 std::string(static_cast<size_t>(filled), '#').c_str(),
                 std::string(static_cast<size_t>(kWidth - filled), '.').c_str(), static_cast<long long>(done_),
                 static_cast<long long>(total_), eta, what.c_str());
    std::fflush(stderr);
    return;
  }
  if (done_ == total_ || std::chrono::duration<double>(now - last_line_).count() >= 5.0) {
    last_line_ = now;
    std::fprintf(stderr, "%s: %lld/%lld done, %.0f s elapsed, %.0f s left\n", label_.c_str(),
                 static_cast<long long>(done_), static_cast<long long>(total_), elapsed, eta);
  }
}

}  // namespace clustersim
