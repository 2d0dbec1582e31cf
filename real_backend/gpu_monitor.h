// The GPUs' SM clock and power while the real backend runs, sampled through NVML (loaded
// at run time with dlopen, so nothing links against it and a machine without the driver
// simply has no samples). A kernel's time moves with the clock, and a GPU at its power
// cap lowers the clock: a step that runs slower than its kernels measured alone often
// shows it here first.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace clustersim::real {

struct GpuClockSummary {
  bool available = false;  // NVML answered for this device
  int samples = 0;
  double sm_mhz_median = 0, sm_mhz_max = 0;  // sampled SM clock; the device's maximum
  double power_w_mean = 0, power_limit_w = 0;
  double power_capped_fraction = 0;  // samples whose clock was held back for power (software cap or power brake)
};

class GpuMonitor {
 public:
  // Samples the given CUDA devices every `period_s` from construction until destruction.
  explicit GpuMonitor(std::vector<int> cuda_devices, double period_s = 0.005);
  ~GpuMonitor();
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  // The window the summary covers (e.g. the timed iterations): the earliest begin and
  // the latest end of those marked, from any thread.
  void mark_begin();
  void mark_end();
  // Per device, over the samples inside the window (all of them when none was marked).
  std::vector<GpuClockSummary> summary() const;

 private:
  struct Sample {
    std::chrono::steady_clock::time_point t;
    unsigned sm_mhz = 0, power_mw = 0;
    bool power_capped = false;
  };
  void run();

  struct Nvml;
  struct NvmlDeleter {
    void operator()(Nvml* n) const;
  };
  std::unique_ptr<Nvml, NvmlDeleter> nvml_;
  std::vector<void*> handles_;  // per device, null where NVML has none
  std::vector<double> max_mhz_, limit_w_;
  double period_s_;
  std::vector<std::vector<Sample>> samples_;
  mutable std::mutex mu_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> begin_ns_{INT64_MAX}, end_ns_{INT64_MIN};
  std::thread thread_;
};

}  // namespace clustersim::real
