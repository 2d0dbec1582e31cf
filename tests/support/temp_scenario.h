// Test helper: writes YAML text to a fresh temporary file and loads it as a scenario.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "scenarios/scenario.h"

namespace clustersim::testing {

// Directories made by temp_dir, removed when the test process exits.
class TempDirs {
 public:
  ~TempDirs() {
    std::error_code ec;
    for (const auto& d : dirs_) std::filesystem::remove_all(d, ec);
  }
  void keep(const std::filesystem::path& d) {
    for (const auto& x : dirs_)
      if (x == d) return;
    dirs_.push_back(d);
  }

 private:
  std::vector<std::filesystem::path> dirs_;
};

inline std::string temp_dir(const std::string& tag) {
  static TempDirs made;
  auto dir = std::filesystem::temp_directory_path() / ("clustersim-" + tag + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  made.keep(dir);
  return dir.string();
}

inline Scenario scenario_from_text(const std::string& yaml, const std::string& tag = "scenario") {
  const std::string path = temp_dir(tag) + "/s.yaml";
  std::ofstream(path) << yaml;
  return load_scenario(path);
}

}  // namespace clustersim::testing
