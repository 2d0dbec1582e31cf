// `clustersim export-chakra`: the scenario's Plan as Chakra execution traces, one file per
// rank, and comm_group.json (plan/chakra.h).
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "cost_models/compute.h"
#include "plan/chakra.h"
#include "plan/training_planner.h"
#include "reports/output_file.h"
#include "scenarios/scenario.h"
#include "sim/run.h"

namespace clustersim {

int cmd_export_chakra(const std::vector<std::string>& args) {
  refuse_repeated(args, {"--out"});
  std::string path, out;
  std::vector<std::string> sets;
  LoadOptions lo;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--set")
      sets.push_back(need_value(args, i));
    else if (a == "--allow-large")
      lo.allow_large = true;
    else if (a == "--out")
      out = need_value(args, i);
    else if (!a.empty() && a[0] == '-')
      throw UsageError("unknown option '" + a + "' for export-chakra");
    else if (path.empty())
      path = a;
    else
      throw UsageError("export-chakra takes one scenario file");
  }
  if (path.empty()) throw UsageError("export-chakra needs a scenario file");
  if (out.empty()) throw UsageError("export-chakra needs --out DIR, the folder the traces go to");
  const Scenario s = load_scenario(path, sets, lo);
  if (!s.sweep.empty())
    std::cerr << s.mark("sweep").str()
              << ": warning: export-chakra writes the scenario as written; sweep points are not exported\n";
  if (s.inference || !s.jobs.empty())
    throw InputError(s.mark(s.inference ? "inference" : "jobs"), "export-chakra writes a training scenario's plan");
  // The scenario's name is each trace's file name: one plain component, so that the files
  // land in --out and nowhere else.
  const std::string& n = s.name;
  if (n.empty() || n[0] == '.' || n.find_first_of("/\\") != std::string::npos)
    throw InputError(s.mark("name"), "name '" + n + "' cannot name the trace files (" + n +
                                         ".<rank>.et), expected a name without '/' or '\\' that does not "
                                         "start with '.'");
  // The longest file name, the last rank's, within the file system's 255 bytes a name.
  const size_t suffix = 1 + std::to_string(s.gpus() - 1).size() + 3;  // ".<rank>.et"
  if (n.size() + suffix > 255)
    throw InputError(s.mark("name"), "name is " + std::to_string(n.size()) +
                                         " bytes, too long for the trace files' names (NAME.<rank>.et), expected at "
                                         "most " +
                                         std::to_string(255 - suffix) + " bytes");
  if (const std::string why = path_name_problem(out); !why.empty())
    throw InputError(SourceMark{"--out", 0, 0}, "--out " + why);
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(out, ec);
  if (fs::is_symlink(st) && !fs::exists(fs::status(out, ec)))
    throw InputError(SourceMark{"--out", 0, 0}, "--out " + out + " is a link to nothing, expected a folder");
  if (fs::exists(st) && !fs::is_directory(fs::status(out, ec)))
    throw InputError(SourceMark{"--out", 0, 0}, "--out " + out + " exists and is not a folder");
  const TrainingPlan tp = scenario_plan(s);
  ExecOptions eo;
  apply_calibration(s, eo.compute, eo.network);
  const std::vector<ChakraFile> files =
      plan_to_chakra(tp.plan, s.name, program_compute_seconds(tp.plan, s.cluster.node.gpu, eo.compute));
  // Every target is checked before any is written: a file that is not a regular one (a
  // folder, a FIFO, a link) stops the export with nothing written.
  std::vector<std::string> paths;
  for (const ChakraFile& f : files) {
    paths.push_back((fs::path(out) / f.name).string());
    const fs::file_status t = fs::symlink_status(paths.back(), ec);
    if (fs::exists(t) && !fs::is_regular_file(t))
      throw InputError(SourceMark{"--out", 0, 0}, "--out: '" + paths.back() +
                                                      "' exists and is not a regular file, expected a regular file "
                                                      "or a new path");
    check_output(SourceMark{"--out", 0, 0}, "--out", paths.back(), scenario_inputs(s));
  }
  // A trace of this name with a rank past this export's (an earlier export of more ranks)
  // would be read back with these, as a rank of the same workload: refused, not removed.
  // A trace of another workload (NAME.<rank>.et of another name) shares the folder's one
  // comm_group.json, which this export would replace under it (and a folder of two workloads
  // does not read back): refused, whichever workload it is, the scenario's own input included.
  const int64_t ranks = static_cast<int64_t>(files.size()) - 1;
  int64_t stale = -1;  // the lowest such rank, whatever order the folder lists its files in
  std::string other;   // the first other workload's trace, by name
  if (fs::is_directory(out, ec))
    for (const fs::directory_entry& e : fs::directory_iterator(out, ec)) {
      const std::string f = e.path().filename().string();
      std::string workload, rank;
      if (!chakra_trace_name(f, workload, rank) || workload.empty() || rank.size() > 9) continue;
      if (workload != s.name) {
        if (other.empty() || f < other) other = f;
        continue;
      }
      const int64_t k = std::stoll(rank);
      if (k >= ranks && (stale < 0 || k < stale)) stale = k;
    }
  if (!other.empty())
    throw InputError(SourceMark{"--out", 0, 0},
                     "--out " + out + " holds " + other + ", a trace of workload '" +
                         other.substr(0, other.rfind('.', other.size() - 4)) +
                         "', whose comm_group.json this export of '" + s.name +
                         "' would replace; expected a folder without another workload's traces");
  if (stale >= 0)
    throw InputError(SourceMark{"--out", 0, 0},
                     "--out " + out + " holds " + s.name + "." + std::to_string(stale) +
                         ".et, a rank past this export's " + std::to_string(ranks) +
                         " (an earlier export of more ranks?); reading the folder back would mix them, expected a "
                         "folder without it");
  fs::create_directories(out, ec);
  if (ec)
    throw InputError(SourceMark{"--out", 0, 0}, "--out " + out + ": cannot create the folder (" + ec.message() + ")");
  for (size_t i = 0; i < files.size(); ++i) write_file_atomically(paths[i], files[i].bytes);
  std::cout << "wrote " << files.size() - 1 << " Chakra traces (" << s.name << ".<rank>.et) and comm_group.json to "
            << out << "\n";
  return 0;
}

}  // namespace clustersim
