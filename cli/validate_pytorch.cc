// `clustersim validate S.yaml --against pytorch`: the scenario's model run as a plain
// PyTorch training step on the local GPU (calibrate/pytorch_reference.py: the same
// layers, SDPA attention, fused AdamW, BF16 autocast) against the simulator's step. The
// reference prints one JSON line of metrics; its iteration time is compared with the
// simulated one. Nothing here needs CUDA: the GPU work is the script's.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "cli/validate.h"
#include "plan/training_planner.h"
#include "reports/summary.h"
#include "sim/run.h"

namespace clustersim {
namespace {

namespace fs = std::filesystem;

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The reference script: CLUSTERSIM_PYTORCH_REFERENCE, else calibrate/ beside the build
// folder the binary lives in.
std::string reference_script() {
  if (const char* env = std::getenv("CLUSTERSIM_PYTORCH_REFERENCE")) return env;
  std::string self(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", self.data(), self.size() - 1);
  if (n > 0) {
    self.resize(static_cast<size_t>(n));
    for (fs::path dir = fs::path(self).parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
      const fs::path p = dir / "calibrate" / "pytorch_reference.py";
      std::error_code ec;
      if (fs::is_regular_file(p, ec)) return p.string();
    }
  }
  return "calibrate/pytorch_reference.py";
}

double json_number(const std::string& line, const std::string& key) {
  const size_t at = line.find("\"" + key + "\":");
  if (at == std::string::npos) return -1;
  return std::strtod(line.c_str() + at + key.size() + 3, nullptr);
}

}  // namespace

int validate_against_pytorch(const Scenario& s, int iterations, int warmup, bool json) {
  if (s.inference)
    throw InputError(s.mark("inference"), "validate --against pytorch compares training steps, expected training:");
  if (s.gpus() != 1)
    throw InputError(s.mark("cluster"), "validate --against pytorch runs one GPU's step, expected a cluster of one GPU "
                                        "(cluster.nodes: 1, cluster.gpus_per_node: 1), got " +
                                            std::to_string(s.gpus()));
  const TrainingLayout l = check_training_layout(s);
  const ModelConfig& m = s.model;
  if (m.moe.experts > 0) throw InputError(s.mark("model.moe"), "the PyTorch reference has no mixture of experts");
  // The model, as the reference script reads it.
  const fs::path dir = fs::temp_directory_path() / ("clustersim-pytorch-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  struct Cleanup {
    fs::path d;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{dir};
  const fs::path model_json = dir / "model.json";
  {
    std::ofstream f(model_json);
    f << "{\"name\": \"" << json_escape(s.name) << "\", \"layers\": " << m.layers << ", \"hidden\": " << m.hidden
      << ", \"heads\": " << m.heads << ", \"kv_heads\": " << m.kv_heads << ", \"ffn_hidden\": " << m.ffn_hidden
      << ", \"ffn_type\": \"" << (m.ffn_type == FfnType::Swiglu ? "swiglu" : "gelu") << "\", \"vocab\": " << m.vocab
      << ", \"seq_len\": " << m.seq_len << ", \"micro_batch\": " << l.micro_batch
      << ", \"micro_batches\": " << l.micro_batches
      << ", \"tied_embeddings\": " << (m.tied_embeddings ? "true" : "false")
      << ", \"biases\": " << (m.biases ? "true" : "false")
      << ", \"learned_positions\": " << (m.learned_positions ? "true" : "false") << "}\n";
  }
  const std::string script = reference_script();
  // A .py reference runs under python3; anything else is run as it is.
  const bool py = script.size() > 3 && script.compare(script.size() - 3, 3, ".py") == 0;
  const std::string cmd = (py ? "python3 " : "") + shell_quote(script) + " --scenario-json " + shell_quote(model_json.string()) +
                          " --iterations " + std::to_string(iterations) + " --warmup " + std::to_string(warmup) +
                          " --out " + shell_quote((dir / "pytorch.sqlite").string()) + " 2>" +
                          shell_quote((dir / "stderr").string());
  std::string out;
  {
    std::FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) throw std::runtime_error("cannot run the PyTorch reference (" + script + ")");
    char buf[4096];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    const int status = ::pclose(p);
    if (status != 0) {
      std::ifstream e(dir / "stderr");
      std::string err((std::istreambuf_iterator<char>(e)), std::istreambuf_iterator<char>());
      if (err.size() > 1500) err = "..." + err.substr(err.size() - 1500);
      throw std::runtime_error("the PyTorch reference (" + script + ") failed" +
                               (WIFEXITED(status) ? " with exit " + std::to_string(WEXITSTATUS(status)) : "") +
                               "; it needs python3 with PyTorch and a CUDA GPU:\n" + err);
    }
  }
  const size_t last = out.rfind('{');
  const double measured = last == std::string::npos ? -1 : json_number(out.substr(last), "iteration_time_s");
  if (!(measured > 0)) throw std::runtime_error("the PyTorch reference printed no iteration_time_s: " + out);
  RunOptions ro;
  ro.keep_spans = false;
  ro.record_link_usage = false;
  double simulated = 0;
  for (const auto& [k, v] : run_training(s, ro).metrics)
    if (k == "iteration_time_s") simulated = v;
  const double err = (simulated - measured) / measured;
  if (json) {
    std::cout << summary_json({{"name", s.name}, {"against", "pytorch"}, {"profile", s.calibration}},
                              {{"pytorch_iteration_s", measured},
                               {"sim_iteration_s", simulated},
                               {"iteration_error", err}})
              << "\n";
  } else {
    std::printf("validate        %s against the PyTorch reference step (%s)\n", s.name.c_str(), script.c_str());
    std::printf("iteration       pytorch %.6f s, simulated %.6f s, error %+.2f%%\n", measured, simulated, 100 * err);
  }
  return 0;
}

}  // namespace clustersim
