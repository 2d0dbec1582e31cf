// Calibration profiles: every constant a real GPU or network can measure, in one YAML
// file. A profile names what it was measured on and overrides the built-in defaults
// key by key; keys it leaves out keep their documented defaults
// (calibrate/profiles/defaults.yaml lists them all with their sources).
//
//   gpu: h200-sxm                  # informational: what was measured
//   compute: {gemm_efficiency: 0.80, attention_efficiency: 0.55, memory_efficiency: 0.90,
//             launch_overhead: 2us}
//   network:
//     link_efficiency: {nvlink: 0.824, pcie: 0.80, network: 0.92}
//     nvls_efficiency: 0.74
//     protocols: {LL: {bandwidth_efficiency: 0.3333333333333333, chunk: 32KiB}, LL128: {...}, Simple: {...}}
//     base_latency: {ring: {LL: 6.6us, LL128: 14us, Simple: 8.4us}, tree: {...}, nvls: {...}}
//     hop_latency: {nvlink: {ring: {LL: 0.6us, ...}, tree: {...}, nvls: {...}}, pcie: {...}, network: {...}}
//                  (a step end to end over a one-switch route: a longer route adds only its extra
//                  latency; docs/model.md, "Route latency beyond NCCL's figures")
#pragma once

#include <string>

#include "cost_models/compute.h"
#include "cost_models/protocol.h"
#include "scenarios/error.h"

namespace clustersim {

struct CalibrationProfile {
  std::string path;
  std::string gpu;          // what it was measured on ("" for the defaults)
  double sm_clock_mhz = 0;  // the GPU's median SM clock while its kernels were measured; 0 unknown
  // Which kernels produced the tables: the library and its version (compute.gemm_backend,
  // compute.attention_backend). "" where the profile does not say.
  std::string gemm_backend, attention_backend;
  ComputeProfile compute;
  NetworkProfile network;
};

// Reads a profile; unknown keys, wrong types and bad units are InputErrors with
// file:line:col. `from` is where the path was given (a scenario key or a flag).
CalibrationProfile load_profile(const std::string& path, const SourceMark& from = {});

// The warning a run with this profile deserves, or "": a profile whose attention table was
// measured on the real backend's own kernel predicts `clustersim real`, not a framework.
std::string profile_warning(const CalibrationProfile& p);

// The warning a run deserves when the profile names the board it was measured on and that
// board is not the scenario's GPU (their model numbers differ: "NVIDIA H200" against
// h100-sxm), or "": its tables then time the other board's kernels.
std::string profile_gpu_warning(const CalibrationProfile& p, const std::string& gpu_name);

}  // namespace clustersim
