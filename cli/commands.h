// The commands, one file each under cli/; cli/main.cc dispatches to them and alone
// decides exit codes. Each throws UsageError (2), InputError (1) or another exception (3).
#pragma once

#include <string>
#include <vector>

namespace clustersim {

int cmd_run(const std::vector<std::string>& args);
int cmd_collective(const std::vector<std::string>& args);
int cmd_sweep(const std::vector<std::string>& args);
int cmd_search(const std::vector<std::string>& args);
int cmd_report(const std::vector<std::string>& args);
int cmd_plan(const std::vector<std::string>& args);
int cmd_export_chakra(const std::vector<std::string>& args);
int cmd_real(const std::vector<std::string>& args);
int cmd_profile_check(const std::vector<std::string>& args);
int cmd_keys();

}  // namespace clustersim
