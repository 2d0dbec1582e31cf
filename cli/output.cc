#include "cli/output.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "reports/output_file.h"
#include "sim/run.h"

namespace clustersim {
namespace {

namespace fs = std::filesystem;

void check_output_path(const Scenario& s, const std::string& key, const std::string& path,
                       const std::vector<std::string>& inputs) {
  if (path.empty()) return;
  check_output(s.mark(key), key, path, inputs, key == "output.sqlite");
}

// The checks of check_output on `target`, the file `path` names, in messages about `path`.
void check_output_target(const SourceMark& mark, const std::string& key, const std::string& path,
                         const std::string& target, const std::vector<std::string>& inputs) {
  std::error_code ec;
  if (fs::is_directory(target, ec))
    throw InputError(mark, key + " '" + path + "' is a directory, expected a file path");
  if (const std::string why = output_path_problem(target); !why.empty())
    throw InputError(mark, key + " '" + path + "' is " + why + ", expected a regular file or a new path");
  for (const std::string& in : inputs)
    if (same_file(target, in))
      throw InputError(mark, key + " '" + path + "' is an input of this command ('" + in +
                                 "'), expected a path that is not read");
  fs::path dir = fs::path(target).parent_path();
  if (dir.empty()) dir = ".";
  // The nearest existing ancestor must be a writable directory (missing ones are created).
  fs::path probe = dir;
  while (!probe.empty() && !fs::exists(probe, ec)) probe = probe.parent_path();
  if (probe.empty()) probe = ".";
  if (!fs::is_directory(probe, ec))
    throw InputError(mark, key + " '" + path + "': '" + probe.string() + "' is not a directory");
  if (::access(probe.c_str(), W_OK) != 0)
    throw InputError(mark, key + " '" + path + "': directory '" + probe.string() + "' is not writable");
  if (fs::exists(target, ec) && ::access(target.c_str(), W_OK) != 0)
    throw InputError(mark, key + " '" + path + "' exists and is not writable");
}

// `path` as the file system will resolve it once the command has made the folders it
// lacks: component by component, a component that exists followed (links included), one
// that does not taken as a folder still to be made, so a ".." after it returns to where it
// was made and what follows is resolved from there ("new/../link/../x" is where link's
// parent is). Empty when a component cannot be examined.
fs::path resolved_as_made(const std::string& path) {
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec);
  if (ec) return {};
  fs::path at = absolute.root_path();
  bool made = false;  // `at` is a folder still to be made (not canonical)
  for (const fs::path& part : absolute.relative_path()) {
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      at = at.parent_path();
      made = made && !fs::exists(at, ec);
      continue;
    }
    const fs::path next = at / part;
    if (!made && fs::exists(fs::symlink_status(next, ec))) {
      const fs::path real = fs::weakly_canonical(next, ec);
      if (ec) return {};
      at = real;
    } else {
      at = next;
      made = true;
    }
  }
  return at;
}

}  // namespace

void check_output(const SourceMark& mark, const std::string& key, const std::string& path,
                  const std::vector<std::string>& inputs, bool database) {
  if (path.empty()) throw InputError(mark, key + " is empty, expected a file path");
  // A path that ends in a folder ("x/", "x/.", "x/..") names no file to write.
  const fs::path named(path);
  if (path.back() == '/' || named.filename() == "." || named.filename() == "..")
    throw InputError(mark, key + " '" + path + "' names a folder, expected a file path");
  if (const std::string why = path_name_problem(path, database); !why.empty())
    throw InputError(mark, key + " '" + path.substr(0, 64) + (path.size() > 64 ? "..." : "") + "' " + why);
  check_output_target(mark, key, path, path, inputs);
  // A database is added to: a file that is there must be one (SQLite's header), or the run
  // would fail at its end, its work lost.
  if (database) {
    std::error_code ec;
    if (fs::is_regular_file(path, ec) && fs::file_size(path, ec) > 0) {
      char head[16] = {};
      std::ifstream in(path, std::ios::binary);
      in.read(head, sizeof head);
      if (!in || std::memcmp(head, "SQLite format 3", 16) != 0)
        throw InputError(mark, key + " '" + path +
                                   "' exists and is not a SQLite database, expected a database to add to or a new "
                                   "path");
    }
  }
  // A path through folders that do not exist yet resolves only once the command makes
  // them ("new/../s.yaml" is then "s.yaml"): it is checked as it will resolve.
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec);
  const fs::path resolved = resolved_as_made(path);
  if (!ec && !resolved.empty() && resolved != absolute) check_output_target(mark, key, path, resolved.string(), inputs);
}

std::string database_output(const Scenario& s, const std::string& out) {
  const bool from_scenario = out.empty();
  const std::string path = from_scenario ? s.output_sqlite : out;
  if (!path.empty())
    check_output(from_scenario ? s.mark("output.sqlite") : SourceMark{"--out", 0, 0},
                 from_scenario ? "output.sqlite" : "--out", path, scenario_inputs(s), true);
  return path;
}

void check_input_file(const std::string& path, const std::string& expected) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw InputError(SourceMark{path, 0, 0}, "file does not exist, expected " + expected);
  if (!fs::is_regular_file(path, ec))
    throw InputError(SourceMark{path, 0, 0}, "not a regular file, expected " + expected);
}

std::vector<std::string> scenario_inputs(const Scenario& s) {
  std::vector<std::string> in = s.inputs;
  if (!s.calibration.empty()) in.push_back(s.calibration);
  if (s.inference && !s.serving.trace.empty()) in.push_back(s.serving.trace);
  return in;
}

void check_output_paths(const Scenario& s) {
  if (!s.output_sqlite.empty() && !s.output_trace.empty()) {
    const fs::path a = resolved_as_made(s.output_sqlite), b = resolved_as_made(s.output_trace);
    const bool same = s.output_sqlite == s.output_trace || (!a.empty() && a == b);
    if (same)
      throw InputError(s.mark("output.trace"),
                       "output.trace names the same file as output.sqlite, expected two different paths");
  }
  const std::vector<std::string> inputs = scenario_inputs(s);
  check_output_path(s, "output.sqlite", s.output_sqlite, inputs);
  check_output_path(s, "output.trace", s.output_trace, inputs);
  for (const char* key : {"output.trace_ranks", "output.trace_stages"})
    if (s.marks.count(key) && s.output_trace.empty())
      throw InputError(s.mark(key), std::string(key) + " selects what the trace shows, expected output.trace too");
  for (int64_t r : s.trace_ranks)
    if (r >= s.gpus())
      throw InputError(s.mark("output.trace_ranks"), "output.trace_ranks names rank " + std::to_string(r) +
                                                         ", expected a rank below the cluster's " +
                                                         std::to_string(s.gpus()) + " GPUs");
  for (int64_t st : s.trace_stages)
    if (st >= s.parallel.pp)
      throw InputError(s.mark("output.trace_stages"), "output.trace_stages names stage " + std::to_string(st) +
                                                          ", expected a stage below parallel.pp = " +
                                                          std::to_string(s.parallel.pp));
}

}  // namespace clustersim
