// Test helper: writes YAML text to a fresh temporary file and loads it as a scenario.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "scenarios/scenario.h"

namespace clustersim::testing {

inline std::string temp_dir(const std::string& tag) {
  auto dir = std::filesystem::temp_directory_path() / ("clustersim-" + tag + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

inline Scenario scenario_from_text(const std::string& yaml, const std::string& tag = "scenario") {
  const std::string path = temp_dir(tag) + "/s.yaml";
  std::ofstream(path) << yaml;
  return load_scenario(path);
}

}  // namespace clustersim::testing
