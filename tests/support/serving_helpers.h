// Helpers the serving tests share: a serving scenario from its inference block, a metric of
// a result, and a Poisson load.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "sim/serving.h"
#include "tests/support/temp_scenario.h"

namespace clustersim {

inline std::string serving_yaml(const std::string& inference, const std::string& model = "llama3-8b", int tp = 1,
                                const std::string& gpu = "h100-sxm") {
  return "name: t\ncluster: {preset: dgx-h100, nodes: 1, gpu: " + gpu + "}\nmodel: {preset: " + model +
         "}\nparallel: {tp: " + std::to_string(tp) + "}\ninference:\n" + inference;
}

inline double metric(const ServingResult& r, const std::string& name) {
  for (const auto& [k, v] : r.metrics)
    if (k == name) return v;
  ADD_FAILURE() << "no metric " << name;
  return 0;
}

inline ServingResult serve(const std::string& inference, const std::string& model = "llama3-8b", int tp = 1,
                           const std::string& gpu = "h100-sxm") {
  return run_serving(testing::scenario_from_text(serving_yaml(inference, model, tp, gpu), "serving"));
}

inline std::string load(const std::string& scheduler, double rate, int64_t requests = 2000) {
  return "  scheduler: " + scheduler + "\n  requests: " + std::to_string(requests) +
         "\n  arrivals: {process: poisson, rate_per_s: " + std::to_string(rate) +
         ", seed: 3}\n  prompt_tokens: {dist: lognormal, mean: 1024, sigma: 0.8, max: 8192}\n"
         "  output_tokens: {dist: lognormal, mean: 256, sigma: 0.8, max: 2048}\n";
}

}  // namespace clustersim
