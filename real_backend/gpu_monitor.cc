#include "real_backend/gpu_monitor.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

namespace clustersim::real {

// The few NVML entry points used, declared by hand (values from NVML's public ABI):
// nvmlReturn_t is an int, NVML_SUCCESS 0; NVML_CLOCK_SM 1; the throttle reasons for the
// software power cap and the hardware power brake are bits 0x4 and 0x80.
struct GpuMonitor::Nvml {
  using Device = void*;
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*by_pci)(const char*, Device*) = nullptr;
  int (*clock)(Device, int, unsigned*) = nullptr;
  int (*max_clock)(Device, int, unsigned*) = nullptr;
  int (*power)(Device, unsigned*) = nullptr;
  int (*limit)(Device, unsigned*) = nullptr;
  int (*reasons)(Device, unsigned long long*) = nullptr;
  static constexpr int kSm = 1;
  static constexpr unsigned long long kPowerReasons = 0x4 | 0x80;  // software power cap, hardware power brake

  bool load() {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return false;
    auto sym = [&](auto& f, const char* name) {
      f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(lib, name));
      return f != nullptr;
    };
    const bool all = sym(init, "nvmlInit_v2") && sym(shutdown, "nvmlShutdown") &&
                     sym(by_pci, "nvmlDeviceGetHandleByPciBusId_v2") && sym(clock, "nvmlDeviceGetClockInfo") &&
                     sym(max_clock, "nvmlDeviceGetMaxClockInfo") && sym(power, "nvmlDeviceGetPowerUsage") &&
                     sym(limit, "nvmlDeviceGetEnforcedPowerLimit") &&
                     sym(reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
    if (!all || init() != 0) {
      dlclose(lib);
      lib = nullptr;
      return false;
    }
    return true;
  }
  ~Nvml() {
    if (lib) {
      shutdown();
      dlclose(lib);
    }
  }
};

GpuMonitor::GpuMonitor(std::vector<int> cuda_devices, double period_s)
    : period_s_(period_s), samples_(cuda_devices.size()) {
  handles_.assign(cuda_devices.size(), nullptr);
  max_mhz_.assign(cuda_devices.size(), 0);
  limit_w_.assign(cuda_devices.size(), 0);
  std::unique_ptr<Nvml, NvmlDeleter> n(new Nvml);
  if (!n->load()) return;  // no driver library here: no samples
  nvml_ = std::move(n);
  for (size_t i = 0; i < cuda_devices.size(); ++i) {
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, cuda_devices[i]) != cudaSuccess) continue;
    Nvml::Device h = nullptr;
    if (nvml_->by_pci(bus, &h) != 0) continue;
    handles_[i] = h;
    unsigned v = 0;
    if (nvml_->max_clock(h, Nvml::kSm, &v) == 0) max_mhz_[i] = v;
    if (nvml_->limit(h, &v) == 0) limit_w_[i] = v * 1e-3;
  }
  thread_ = std::thread([this] { run(); });
}

void GpuMonitor::NvmlDeleter::operator()(Nvml* n) const { delete n; }

GpuMonitor::~GpuMonitor() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void GpuMonitor::run() {
  const auto period = std::chrono::duration<double>(period_s_);
  while (!stop_) {
    for (size_t i = 0; i < handles_.size(); ++i) {
      if (!handles_[i]) continue;
      Sample s;
      s.t = std::chrono::steady_clock::now();
      unsigned long long why = 0;
      if (nvml_->clock(handles_[i], Nvml::kSm, &s.sm_mhz) != 0 || nvml_->power(handles_[i], &s.power_mw) != 0) continue;
      if (nvml_->reasons(handles_[i], &why) == 0) s.power_capped = (why & Nvml::kPowerReasons) != 0;
      std::lock_guard<std::mutex> lock(mu_);
      samples_[i].push_back(s);
    }
    std::this_thread::sleep_for(period);
  }
}

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void GpuMonitor::mark_begin() {
  const int64_t t = now_ns();
  int64_t cur = begin_ns_.load();
  while (t < cur && !begin_ns_.compare_exchange_weak(cur, t)) {
  }
}

void GpuMonitor::mark_end() {
  const int64_t t = now_ns();
  int64_t cur = end_ns_.load();
  while (t > cur && !end_ns_.compare_exchange_weak(cur, t)) {
  }
}

std::vector<GpuClockSummary> GpuMonitor::summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t b = begin_ns_.load(), e = end_ns_.load();
  const bool window = b != INT64_MAX && e != INT64_MIN;
  std::vector<GpuClockSummary> out(samples_.size());
  for (size_t i = 0; i < samples_.size(); ++i) {
    std::vector<double> mhz;
    double power = 0;
    int capped = 0;
    for (const Sample& s : samples_[i]) {
      const int64_t t = std::chrono::duration_cast<std::chrono::nanoseconds>(s.t.time_since_epoch()).count();
      if (window && (t < b || t > e)) continue;
      mhz.push_back(s.sm_mhz);
      power += s.power_mw * 1e-3;
      capped += s.power_capped ? 1 : 0;
    }
    GpuClockSummary& g = out[i];
    g.power_limit_w = limit_w_[i];
    g.sm_mhz_max = max_mhz_[i];
    if (mhz.empty()) continue;
    std::sort(mhz.begin(), mhz.end());
    g.available = true;
    g.samples = static_cast<int>(mhz.size());
    g.sm_mhz_median = mhz[mhz.size() / 2];
    g.power_w_mean = power / static_cast<double>(mhz.size());
    g.power_capped_fraction = static_cast<double>(capped) / static_cast<double>(mhz.size());
  }
  return out;
}

}  // namespace clustersim::real
