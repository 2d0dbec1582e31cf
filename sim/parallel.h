// Work spread over threads: each index of [first, n) runs once, on one of `jobs` threads
// (the caller's among them). Each thread first makes its own state (a topology, say);
// results go where fn puts them, so which thread ran which index never shows. The first
// exception stops the rest and is rethrown once every thread has stopped.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace clustersim {

template <typename MakeState, typename Fn>
void parallel_for(int64_t first, int64_t n, int jobs, MakeState make_state, Fn fn) {
  if (first >= n) return;
  std::atomic<int64_t> next{first};
  std::exception_ptr failure;
  std::mutex failure_mu;
  auto worker = [&] {
    try {
      auto state = make_state();
      for (int64_t i = next++; i < n; i = next++) fn(state, i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(failure_mu);
      if (!failure) failure = std::current_exception();
      next = n;
    }
  };
  const int threads = static_cast<int>(std::clamp<int64_t>(jobs, 1, n - first));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace clustersim
