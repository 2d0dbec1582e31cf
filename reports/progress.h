// Progress of a long command on stderr: a bar redrawn in place on a terminal, plain
// lines (at most one every few seconds, and the last) when stderr is a file or a pipe.
// Nothing is shown for work that ends within the first second. Thread-safe: workers may
// call tick() concurrently.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace clustersim {

class Progress {
 public:
  // `enabled` false: silent (--json output, tests).
  Progress(std::string label, int64_t total, bool enabled = true);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // One more item done; `what` names it.
  void tick(const std::string& what = "");
  // Absolute progress, for work counted elsewhere (events, requests).
  void update(int64_t done, int64_t total);
  void finish();  // ends the line on a terminal

 private:
  void draw(const std::string& what);
  std::string label_;
  int64_t total_ = 0, done_ = 0;
  bool enabled_ = true, tty_ = false, finished_ = false, drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_line_;
  std::mutex mu_;
};

}  // namespace clustersim
