// The harness of the command-line tests: a fresh directory per test, the binary run
// through the shell with its stdout and stderr captured, and the checks of the error
// catalogue (exit code, FILE:LINE:COL message, nothing written).
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#ifndef CLUSTERSIM_SOURCE_DIR
#define CLUSTERSIM_SOURCE_DIR "."
#endif
#ifndef CLUSTERSIM_BINARY
#define CLUSTERSIM_BINARY "clustersim"
#endif

namespace {

namespace fs = std::filesystem;

const std::string kExample = std::string(CLUSTERSIM_SOURCE_DIR) + "/scenarios/examples/gpt3-1.3b-dgx-h100.yaml";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// The number after `"key": ` in a --json line; -1e9 when the key is absent.
inline double json_field(const std::string& out, const std::string& key) {
  const size_t at = out.find("\"" + key + "\": ");
  return at == std::string::npos ? -1e9 : std::stod(out.substr(at + key.size() + 4));
}

struct CliResult {
  int code = -1;
  std::string out, err;
};

std::ostream& operator<<(std::ostream& os, const CliResult& r) {
  return os << "exit " << r.code << "\n--- stdout ---\n" << r.out << "--- stderr ---\n" << r.err;
}

// A fresh directory per test: /tmp/clustersim_cli_<test>_<pid>. Scenario outputs go to
// dir/out/, the captured stdout/stderr to dir/capture/.
class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path("/tmp") / ("clustersim_cli_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "capture");
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Runs the binary with `args` (already shell-quoted where needed) in the test's
  // directory; with `limit_s`, under timeout(1) (exit 124 when it runs past it).
  CliResult cli(const std::string& args, int limit_s = 0) {
    const fs::path out = dir_ / "capture" / "stdout", err = dir_ / "capture" / "stderr";
    const std::string limit = limit_s > 0 ? "timeout " + std::to_string(limit_s) + " " : "";
    const std::string cmd = "cd " + quote(dir_.string()) + " && " + limit + quote(CLUSTERSIM_BINARY) + " " + args +
                            " >" + quote(out.string()) + " 2>" + quote(err.string());
    const int status = std::system(cmd.c_str());
    CliResult r;
    r.code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read_file(out);
    r.err = read_file(err);
    return r;
  }

  std::string write(const std::string& rel, const std::string& text) {
    fs::path p = dir_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }

  std::string sqlite_path() const { return (dir_ / "out" / "run.sqlite").string(); }
  std::string trace_path() const { return (dir_ / "out" / "run.trace.json").string(); }

  // A scenario whose output block (appended last, so it moves no line above it) names
  // dir/out/run.sqlite and dir/out/run.trace.json.
  std::string scenario(const std::string& rel, const std::string& body) {
    return write(rel, body + "output:\n  sqlite: " + sqlite_path() + "\n  trace: " + trace_path() + "\n");
  }

  void expect_nothing_written() {
    EXPECT_FALSE(fs::exists(sqlite_path())) << sqlite_path();
    EXPECT_FALSE(fs::exists(trace_path())) << trace_path();
    EXPECT_FALSE(fs::exists(dir_ / "out")) << "the output folder was created";
  }

  // Exit 1, "where: error: ..." containing `phrase` on stderr, nothing on stdout, no output files.
  void expect_input_error(const CliResult& r, const std::string& where, const std::string& phrase) {
    EXPECT_EQ(r.code, 1) << r;
    EXPECT_TRUE(starts_with(r.err, where + ": error: ")) << r << "\nexpected prefix: " << where << ": error: ";
    EXPECT_NE(r.err.find(phrase), std::string::npos) << r << "\nexpected phrase: " << phrase;
    EXPECT_TRUE(r.out.empty()) << r;
    expect_nothing_written();
  }

  void expect_usage_error(const CliResult& r, const std::string& phrase) {
    EXPECT_EQ(r.code, 2) << r;
    EXPECT_TRUE(starts_with(r.err, "clustersim: ")) << r;
    EXPECT_NE(r.err.find(phrase), std::string::npos) << r << "\nexpected phrase: " << phrase;
    EXPECT_NE(r.err.find("usage: clustersim"), std::string::npos) << r;
    EXPECT_TRUE(r.out.empty()) << r;
    expect_nothing_written();
  }

  fs::path dir_;
};

// The rows of `sql` on `db`, one line each, columns joined by |, NULL as NULL.
inline std::string query_text(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* st = nullptr;
  std::string out;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) return "prepare failed";
  while (sqlite3_step(st) == SQLITE_ROW) {
    for (int c = 0; c < sqlite3_column_count(st); ++c) {
      const unsigned char* t = sqlite3_column_text(st, c);
      out += (c ? "|" : "") + std::string(t ? reinterpret_cast<const char*>(t) : "NULL");
    }
    out += "\n";
  }
  sqlite3_finalize(st);
  return out;
}

}  // namespace
