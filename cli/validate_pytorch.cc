// `clustersim validate S.yaml --against pytorch`: the scenario's model run as a plain
// PyTorch training step on the local GPU (calibrate/pytorch_reference.py: the same
// layers, SDPA attention, fused AdamW, BF16 autocast) against the simulator's step. The
// reference prints one JSON line of metrics; its iteration time is compared with the
// simulated one. Nothing here needs CUDA: the GPU work is the script's.
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "cli/output.h"
#include "cli/validate.h"
#include "plan/training_planner.h"
#include "reports/summary.h"
#include "sim/run.h"
#include "topology/gpu.h"

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

// The newest PyTorch run in `path`: its step time, after checking that its model (the
// JSON the script stored as runs.scenario_yaml) is `want`'s, field by field.
std::string json_text(const std::string& j, const std::string& key) {
  const std::string pat = "\"" + key + "\": \"";
  const size_t at = j.find(pat);
  if (at == std::string::npos) return {};
  const size_t from = at + pat.size();
  return j.substr(from, j.find('"', from) - from);
}

// The step time of the last PyTorch run in the database; its board in *device ("" if none).
double recorded_step(const std::string& path, const std::string& want, std::string* device) {
  auto fail = [&](const std::string& what) { return InputError(SourceMark{path, 0, 0}, what); };
  check_input_file(path, "a database of calibrate/pytorch_reference.py");
  sqlite3* db = nullptr;
  struct Close {
    sqlite3*& d;
    ~Close() { sqlite3_close(d); }
  } close{db};
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK)
    throw fail("cannot be opened as a database");
  sqlite3_stmt* st = nullptr;
  const char* sql =
      "SELECT r.scenario_yaml, m.value, (SELECT k.device FROM ranks k WHERE k.run_id = r.run_id "
      "ORDER BY k.rank LIMIT 1) FROM runs r JOIN metrics m ON m.run_id = r.run_id "
      "WHERE r.source = 'pytorch' AND m.key = 'iteration_time_s' ORDER BY r.run_id DESC LIMIT 1";
  if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) != SQLITE_OK)
    throw fail("is not a timeline with a PyTorch run (" + std::string(sqlite3_errmsg(db)) + ")");
  std::string model;
  double t = -1;
  if (sqlite3_step(st) == SQLITE_ROW) {
    const unsigned char* m = sqlite3_column_text(st, 0);
    model = m ? reinterpret_cast<const char*>(m) : "";
    t = sqlite3_column_double(st, 1);
    const unsigned char* d = sqlite3_column_text(st, 2);
    *device = d ? reinterpret_cast<const char*>(d) : "";
  }
  sqlite3_finalize(st);
  if (!(t > 0)) throw fail("holds no PyTorch run with an iteration_time_s, expected one the reference script wrote");
  for (const char* key :
       {"layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len", "micro_batch", "micro_batches"}) {
    const double a = json_number(model, key), b = json_number(want, key);
    if (a != b)
      throw fail("is a PyTorch run of another model: " + std::string(key) + " " +
                 (a < 0 ? std::string("absent") : std::to_string(static_cast<int64_t>(a))) +
                 ", expected the scenario's " + std::to_string(static_cast<int64_t>(b)));
  }
  if (json_text(model, "ffn_type") != json_text(want, "ffn_type"))
    throw fail("is a PyTorch run of another model: ffn_type " + json_text(model, "ffn_type") +
               ", expected the scenario's " + json_text(want, "ffn_type"));
  return t;
}

}  // namespace

int validate_against_pytorch(const Scenario& s, int iterations, int warmup, bool json, const std::string& recorded) {
  if (s.inference)
    throw InputError(s.mark("inference"), "validate --against pytorch compares training steps, expected training:");
  if (s.gpus() != 1)
    throw InputError(s.mark("cluster"),
                     "validate --against pytorch runs one GPU's step, expected a cluster of one GPU "
                     "(cluster.nodes: 1, cluster.gpus_per_node: 1), got " +
                         std::to_string(s.gpus()));
  const TrainingLayout l = check_training_layout(s);
  const ModelConfig& m = s.model;
  if (m.moe.experts > 0) throw InputError(s.mark("model.moe"), "the PyTorch reference has no mixture of experts");
  if (m.is_mla())
    throw InputError(s.mark("model.mla"), "the PyTorch reference has no multi-head latent attention, expected "
                                          "model.mla.kv_lora_rank: 0");
  if (m.mtp_layers > 0)
    throw InputError(s.mark("model.mtp_layers"), "the PyTorch reference has no multi-token prediction, expected "
                                                 "model.mtp_layers: 0");
  if (m.head_dim() * m.heads != m.hidden)
    throw InputError(s.mark("model.head_dim"), "the PyTorch reference builds heads of hidden / heads, expected no "
                                               "model.head_dim other than " + std::to_string(m.hidden / m.heads));
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
  std::ostringstream model;
  {
    std::ostream& f = model;
    f << "{\"name\": \"" << json_escape(s.name) << "\", \"layers\": " << m.layers << ", \"hidden\": " << m.hidden
      << ", \"heads\": " << m.heads << ", \"kv_heads\": " << m.kv_heads << ", \"ffn_hidden\": " << m.ffn_hidden
      << ", \"ffn_type\": \"" << (m.ffn_type == FfnType::Swiglu ? "swiglu" : "gelu") << "\", \"vocab\": " << m.vocab
      << ", \"seq_len\": " << m.seq_len << ", \"micro_batch\": " << l.micro_batch
      << ", \"micro_batches\": " << l.micro_batches
      << ", \"tied_embeddings\": " << (m.tied_embeddings ? "true" : "false")
      << ", \"biases\": " << (m.biases ? "true" : "false")
      << ", \"learned_positions\": " << (m.learned_positions ? "true" : "false") << "}\n";
  }
  const std::string script = recorded.empty() ? reference_script() : recorded;
  double measured = -1;
  if (!recorded.empty()) {
    std::string device;
    measured = recorded_step(recorded, model.str(), &device);
    if (!board_is_preset_model(device, s.cluster.node.gpu.name))
      std::cerr << recorded << ": warning: the step was recorded on " << device << " and the scenario's GPU is "
                << s.cluster.node.gpu.name << "\n";
  } else {
    std::ofstream(model_json) << model.str();
    // A .py reference runs under python3; anything else is run as it is.
    const bool py = script.size() > 3 && script.compare(script.size() - 3, 3, ".py") == 0;
    const std::string cmd =
        (py ? "python3 " : "") + shell_quote(script) + " --scenario-json " + shell_quote(model_json.string()) +
        " --iterations " + std::to_string(iterations) + " --warmup " + std::to_string(warmup) + " --out " +
        shell_quote((dir / "pytorch.sqlite").string()) + " 2>" + shell_quote((dir / "stderr").string());
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
    measured = last == std::string::npos ? -1 : json_number(out.substr(last), "iteration_time_s");
    if (!(measured > 0)) throw std::runtime_error("the PyTorch reference printed no iteration_time_s: " + out);
  }
  RunOptions ro;
  ro.keep_spans = false;
  ro.record_link_usage = false;
  double simulated = 0;
  for (const auto& [k, v] : run_training(s, ro).metrics)
    if (k == "iteration_time_s") simulated = v;
  const double err = (simulated - measured) / measured;
  if (json) {
    std::cout << summary_json(
                     {{"name", s.name}, {"against", "pytorch"}, {"profile", s.calibration}},
                     {{"pytorch_iteration_s", measured}, {"sim_iteration_s", simulated}, {"iteration_error", err}})
              << "\n";
  } else {
    std::printf("validate        %s against the PyTorch reference step (%s)\n", s.name.c_str(), script.c_str());
    std::printf("iteration       pytorch %.6f s, simulated %.6f s, error %+.2f%%\n", measured, simulated, 100 * err);
  }
  return 0;
}

}  // namespace clustersim
