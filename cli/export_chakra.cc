// `clustersim export-chakra`: the scenario's Plan as Chakra execution traces, one file per
// rank, and comm_group.json (plan/chakra.h).
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "plan/chakra.h"
#include "plan/training_planner.h"
#include "reports/output_file.h"
#include "scenarios/scenario.h"
#include "sim/run.h"

namespace clustersim {

int cmd_export_chakra(const std::vector<std::string>& args) {
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
  if (s.inference || !s.jobs.empty())
    throw InputError(s.mark(s.inference ? "inference" : "jobs"), "export-chakra writes a training scenario's plan");
  std::error_code ec;
  if (std::filesystem::exists(out, ec) && !std::filesystem::is_directory(out, ec))
    throw InputError(SourceMark{"--out", 0, 0}, "--out " + out + " exists and is not a folder");
  const TrainingPlan tp = build_training_plan(s);
  ExecOptions eo;
  apply_calibration(s, eo.compute, eo.network);
  const std::vector<ChakraFile> files = plan_to_chakra(tp.plan, s.name, s.cluster.node.gpu, eo.compute);
  std::filesystem::create_directories(out);
  for (const ChakraFile& f : files) {
    const std::string p = (std::filesystem::path(out) / f.name).string();
    check_output(SourceMark{"--out", 0, 0}, "--out", p, scenario_inputs(s));
    write_file_atomically(p, f.bytes);
  }
  std::cout << "wrote " << files.size() - 1 << " Chakra traces (" << s.name << ".<rank>.et) and comm_group.json to "
            << out << "\n";
  return 0;
}

}  // namespace clustersim
