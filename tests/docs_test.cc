// The documentation that is generated from the code stays in step with it.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace {

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

TEST(Docs, ScenarioKeysPageMatchesTheKeyTable) {
  std::ifstream in(std::string(CLUSTERSIM_SOURCE_DIR) + "/docs/scenario-keys.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string page = ss.str();
  const std::string table = run(std::string(CLUSTERSIM_BINARY) + " keys");
  ASSERT_FALSE(table.empty());
  EXPECT_NE(page.find(table), std::string::npos)
      << "docs/scenario-keys.md is out of date: regenerate its table with `clustersim keys`";
}

}  // namespace
