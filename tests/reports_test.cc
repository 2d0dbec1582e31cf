// Tests for the SQLite and Chrome-trace writers on a hand-built two-rank Timeline.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include "reports/sqlite_writer.h"
#include "reports/trace_writer.h"

namespace clustersim {
namespace {

namespace fs = std::filesystem;

// One program shared by both ranks: a GEMM, a memory op and a TP all-reduce.
Plan tiny_plan() {
  Plan plan;
  plan.world_size = 2;
  plan.rank_program = {0, 0};
  plan.mirror_of = {0, 1};
  plan.rank_groups.assign(2, {-1, -1, -1, -1, -1, -1, -1});
  plan.add_group(GroupKind::TP, {0, 1});

  Program p;
  p.name = "layer";
  const uint8_t compute = p.stream("compute");
  const uint8_t tp = p.stream("tp");
  Op gemm;
  gemm.kind = OpKind::Gemm;
  gemm.stream = compute;
  gemm.phase = Phase::Forward;
  gemm.layer = 0;
  gemm.micro_batch = 0;
  gemm.name = plan.intern("fwd.qkv");
  gemm.m = 128, gemm.n = 256, gemm.k = 64, gemm.batch = 1;
  const uint32_t g = p.add(gemm);
  Op mem;
  mem.kind = OpKind::Memory;
  mem.stream = compute;
  mem.phase = Phase::Forward;
  mem.layer = 0;
  mem.micro_batch = 0;
  mem.name = plan.intern("fwd.\"gelu\"\n");  // exercises JSON escaping
  mem.bytes_read = 1000, mem.bytes_written = 500, mem.flops = 250;
  const uint32_t m = p.add(mem, {g});
  Op ar;
  ar.kind = OpKind::Collective;
  ar.stream = tp;
  ar.phase = Phase::Forward;
  ar.layer = 0;
  ar.micro_batch = 0;
  ar.collective = CollectiveKind::AllReduce;
  ar.group = GroupKind::TP;
  ar.name = plan.intern("fwd.tp_allreduce");
  ar.bytes = 4096;
  p.add(ar, {m});
  plan.programs.push_back(std::move(p));
  return plan;
}

Timeline tiny_timeline(const Plan& plan) {
  Timeline t;
  t.plan = &plan;
  t.run.name = "tiny";
  t.run.network_model = "analytic";
  t.run.seed = 7;
  t.run.scenario_yaml = "model: tiny\n";
  t.run.metrics = {{"iteration_time_s", 0.5}, {"mfu", 0.4}};
  t.ranks = {{0, 0, 0, "node0/gpu0", 0, 0}, {1, 0, 1, "node0/gpu1", 0, 1}};
  t.links = {{0, "node0/gpu0", "node0/gpu1", "nvlink", 450e9, 1e-6}};
  for (int32_t r = 0; r < 2; ++r) {
    t.spans.push_back({r, 0, 0, 1234567, 2000000});
    t.spans.push_back({r, 0, 1, 2000000, 2500000});
    t.spans.push_back({r, 1, 2, 2500000, 4000000});
  }
  // 225 kB over 1 us on a 450 GB/s link is half its capacity.
  t.link_usage = {{0, 2500000, 3500000, 225000}, {0, 4000000, 4000000, 0}};
  return t;
}

// A fresh directory per test, removed afterwards.
class ReportsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    // The pid keeps concurrent runs of this binary (ctest -j, two checkouts) apart.
    dir_ = fs::temp_directory_path() /
           ("clustersim_reports_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
  Plan plan_ = tiny_plan();
  Timeline timeline_ = tiny_timeline(plan_);
};

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close(db); }
};
using Db = std::unique_ptr<sqlite3, DbCloser>;

Db open_db(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    throw std::runtime_error("test cannot open " + path);
  }
  return Db(db);
}

// Every row of a query, columns joined by '|' and rows by '\n' (NULL prints as "NULL").
std::string query(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) != SQLITE_OK)
    throw std::runtime_error(std::string("bad test query: ") + sqlite3_errmsg(db));
  std::string out;
  while (sqlite3_step(s) == SQLITE_ROW) {
    for (int c = 0; c < sqlite3_column_count(s); ++c) {
      if (c) out += '|';
      const auto* text = sqlite3_column_text(s, c);
      out += text ? reinterpret_cast<const char*>(text) : "NULL";
    }
    out += '\n';
  }
  sqlite3_finalize(s);
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST_F(ReportsTest, SqliteHoldsEveryTable) {
  write_sqlite(timeline_, path("run.sqlite"));
  Db db = open_db(path("run.sqlite"));
  EXPECT_EQ(query(db.get(), "PRAGMA user_version"), "2\n");
  EXPECT_EQ(
      query(db.get(), "SELECT run_id, name, source, kind, network_model, seed, scenario_yaml, complete FROM runs"),
      "1|tiny|sim|training|analytic|7|model: tiny\n|1\n");
  EXPECT_EQ(query(db.get(), "SELECT run_id, key, value FROM metrics ORDER BY rowid"),
            "1|iteration_time_s|0.5\n1|mfu|0.4\n");
  EXPECT_EQ(query(db.get(), "SELECT rank, node, local_gpu, device, program, mirror_of FROM ranks ORDER BY rank"),
            "0|0|0|node0/gpu0|0|0\n1|0|1|node0/gpu1|0|1\n");
  EXPECT_EQ(query(db.get(), "SELECT group_id, kind, size, ranks FROM groups"), "0|tp|2|0,1\n");

  // gemm flops = 2·m·n·k·batch = 2·128·256·64 = 4194304.
  EXPECT_EQ(query(db.get(),
                  "SELECT program, op_index, name, kind, stream, phase, layer, micro_batch, dtype, m, n, k, batch, "
                  "bytes_read, bytes_written, bytes, collective, grp, flops FROM ops ORDER BY op_index"),
            "0|0|fwd.qkv|gemm|compute|forward|0|0|bf16|128|256|64|1|0|0|0|NULL|NULL|4194304.0\n"
            "0|1|fwd.\"gelu\"\n|memory|compute|forward|0|0|bf16|0|0|0|1|1000|500|0|NULL|NULL|250.0\n"
            "0|2|fwd.tp_allreduce|collective|tp|forward|0|0|bf16|0|0|0|1|0|0|4096|all-reduce|tp|0.0\n");

  // Span bytes: HBM traffic for compute ops, the message for the collective.
  EXPECT_EQ(query(db.get(), "SELECT count(*) FROM spans"), "6\n");
  EXPECT_EQ(query(db.get(),
                  "SELECT rank, stream, op_index, name, kind, start_ps, end_ps, bytes, flops, source FROM spans "
                  "WHERE rank = 1 ORDER BY start_ps"),
            "1|compute|0|fwd.qkv|gemm|1234567|2000000|0|4194304.0|sim\n"
            "1|compute|1|fwd.\"gelu\"\n|memory|2000000|2500000|1500|250.0|sim\n"
            "1|tp|2|fwd.tp_allreduce|collective|2500000|4000000|4096|0.0|sim\n");
  EXPECT_EQ(query(db.get(), "SELECT count(*), sum(dur_ps) FROM span_view WHERE phase = 'forward'"), "6|5530866\n");

  EXPECT_EQ(query(db.get(), "SELECT link_id, src, dst, kind, bandwidth_Bps, latency_s FROM links"),
            "0|node0/gpu0|node0/gpu1|nvlink|450000000000.0|1.0e-06\n");
  EXPECT_EQ(query(db.get(), "SELECT link_id, start_ps, end_ps, bytes, utilization FROM link_usage ORDER BY start_ps"),
            "0|2500000|3500000|225000.0|0.5\n0|4000000|4000000|0.0|0.0\n");
}

// A collective phase that loads several links alike is one link_loads row; the
// link_usage view gives back one row per link, with each link's own utilization, and
// a link of unknown capacity a NULL one.
TEST_F(ReportsTest, SqliteStoresAPhasesLinksAsOneLoad) {
  Timeline t = timeline_;
  t.links.push_back({1, "node0/gpu1", "node0/gpu0", "nvlink", 225e9, 1e-6});
  t.links.push_back({2, "node0/gpu0", "switch", "pcie", 0, 1e-6});
  t.link_usage = {{0, 2500000, 3500000, 225000}, {1, 2500000, 3500000, 225000}, {2, 2500000, 3500000, 225000},
                  {0, 4000000, 5000000, 450000}, {1, 4000000, 5000000, 90000}};
  write_sqlite(t, path("loads.sqlite"));
  Db db = open_db(path("loads.sqlite"));
  EXPECT_EQ(query(db.get(), "SELECT load_id, start_ps, end_ps, bytes, links FROM link_loads ORDER BY load_id"),
            "0|2500000|3500000|225000.0|[0,1,2]\n1|4000000|5000000|450000.0|[0]\n2|4000000|5000000|90000.0|[1]\n");
  EXPECT_EQ(query(db.get(),
                  "SELECT link_id, start_ps, end_ps, bytes, utilization FROM link_usage ORDER BY start_ps, link_id"),
            "0|2500000|3500000|225000.0|0.5\n1|2500000|3500000|225000.0|1.0\n2|2500000|3500000|225000.0|NULL\n"
            "0|4000000|5000000|450000.0|1.0\n1|4000000|5000000|90000.0|0.4\n");
}

TEST_F(ReportsTest, SqliteAppendsRunsWithoutTouchingEarlierOnes) {
  const std::string db_path = path("runs.sqlite");
  write_sqlite(timeline_, db_path);
  const std::string spans_of_run1 = query(open_db(db_path).get(), "SELECT * FROM spans WHERE run_id = 1");

  timeline_.run.name = "second";
  write_sqlite(timeline_, db_path);
  Db db = open_db(db_path);
  EXPECT_EQ(query(db.get(), "SELECT run_id, name, complete FROM runs ORDER BY run_id"), "1|tiny|1\n2|second|1\n");
  EXPECT_EQ(query(db.get(), "SELECT * FROM spans WHERE run_id = 1"), spans_of_run1);
  EXPECT_EQ(query(db.get(), "SELECT run_id, count(*) FROM ops GROUP BY run_id"), "1|3\n2|3\n");
  // Same Timeline, same rows: only run_id differs.
  const std::string rows =
      "SELECT rank, stream, op_index, name, kind, start_ps, end_ps, bytes, flops, source FROM spans WHERE run_id = ";
  EXPECT_EQ(query(db.get(), rows + "1 ORDER BY rowid"), query(db.get(), rows + "2 ORDER BY rowid"));
}

TEST_F(ReportsTest, SqliteRefusesTextFileAndLeavesItAlone) {
  const std::string text_path = path("notes.txt");
  const std::string text = "this is not a database, it is a grocery list\n";
  std::ofstream(text_path, std::ios::binary) << text;
  try {
    write_sqlite(timeline_, text_path);
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write " + text_path + ": it is damaged or not a SQLite database"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(read_file(text_path), text);
  EXPECT_FALSE(fs::exists(text_path + "-journal"));
}

TEST_F(ReportsTest, SqliteRefusesOtherSchemaVersionsAndForeignDatabases) {
  const std::string newer = path("newer.sqlite");
  sqlite3_exec(open_db(newer).get(), "PRAGMA user_version = 3", nullptr, nullptr, nullptr);
  EXPECT_THROW(write_sqlite(timeline_, newer), std::runtime_error);
  // Version 1 kept one link_usage row per link: appended to, it would mix layouts.
  const std::string older = path("older.sqlite");
  sqlite3_exec(open_db(older).get(), "CREATE TABLE runs(x); PRAGMA user_version = 1", nullptr, nullptr, nullptr);
  EXPECT_THROW(write_sqlite(timeline_, older), std::runtime_error);

  const std::string foreign = path("foreign.sqlite");
  sqlite3_exec(open_db(foreign).get(), "CREATE TABLE t(x)", nullptr, nullptr, nullptr);
  EXPECT_THROW(write_sqlite(timeline_, foreign), std::runtime_error);
  EXPECT_EQ(query(open_db(foreign).get(), "SELECT name FROM sqlite_master"), "t\n");
}

TEST_F(ReportsTest, SqliteIntoMissingDirectoryCreatesNothing) {
  const std::string missing = path("no/such/dir/run.sqlite");
  EXPECT_THROW(write_sqlite(timeline_, missing), std::runtime_error);
  EXPECT_FALSE(fs::exists(path("no")));
}

TEST_F(ReportsTest, SqliteFailureMidRunRollsBack) {
  const std::string db_path = path("rollback.sqlite");
  Timeline bad = timeline_;
  bad.link_usage.push_back({99, 0, 1, 1});  // no link 99: detected inside the transaction

  EXPECT_THROW(write_sqlite(bad, db_path), std::runtime_error);
  EXPECT_FALSE(fs::exists(db_path));  // a file this call created is removed

  write_sqlite(timeline_, db_path);
  EXPECT_THROW(write_sqlite(bad, db_path), std::runtime_error);
  Db db = open_db(db_path);
  EXPECT_EQ(query(db.get(), "SELECT run_id, complete FROM runs"), "1|1\n");
  EXPECT_EQ(query(db.get(), "SELECT count(*) FROM spans"), "6\n");
}

TEST(TraceFormat, PicosecondsPrintAsExactMicroseconds) {
  EXPECT_EQ(format_ps_as_us(0), "0");
  EXPECT_EQ(format_ps_as_us(1234567), "1.234567");
  EXPECT_EQ(format_ps_as_us(1500000), "1.5");
  EXPECT_EQ(format_ps_as_us(2000000), "2");
  EXPECT_EQ(format_ps_as_us(1), "0.000001");
  EXPECT_EQ(format_ps_as_us(-1500000), "-1.5");
  EXPECT_EQ(format_ps_as_us(INT64_MIN), "-9223372036854.775808");
}

TEST_F(ReportsTest, TraceHasMetadataAndCompleteEvents) {
  const std::string trace_path = path("run.trace.json");
  write_chrome_trace(timeline_, trace_path);
  const std::string json = read_file(trace_path);
  EXPECT_EQ(json.rfind("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", 0), 0u);
  EXPECT_NE(json.find("\"name\":\"process_name\",\"args\":{\"name\":\"rank 1 (node 0 gpu 1)\"}"), std::string::npos);
  EXPECT_NE(json.find("\"name\":\"process_sort_index\",\"args\":{\"sort_index\":1}"), std::string::npos);
  EXPECT_NE(json.find("\"pid\":0,\"tid\":1,\"name\":\"thread_name\",\"args\":{\"name\":\"tp\"}"), std::string::npos);
  EXPECT_NE(json.find("{\"ph\":\"X\",\"name\":\"fwd.qkv\",\"cat\":\"gemm\",\"pid\":0,\"tid\":0,"
                      "\"ts\":1.234567,\"dur\":0.765433,"
                      "\"args\":{\"op\":0,\"layer\":0,\"micro_batch\":0,\"phase\":\"forward\",\"bytes\":0,"
                      "\"flops\":4194304}}"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"name\":\"fwd.\\\"gelu\\\"\\n\",\"cat\":\"memory\""), std::string::npos);
  EXPECT_NE(json.find("\"cat\":\"collective\",\"pid\":1,\"tid\":1,\"ts\":2.5,\"dur\":1.5"), std::string::npos);
  EXPECT_EQ(json.substr(json.size() - 5), "}\n]}\n");
  EXPECT_FALSE(fs::exists(trace_path + ".tmp"));
}

TEST_F(ReportsTest, TraceIsByteIdenticalAcrossWrites) {
  write_chrome_trace(timeline_, path("a.json"));
  write_chrome_trace(timeline_, path("b.json"));
  EXPECT_EQ(read_file(path("a.json")), read_file(path("b.json")));
  write_chrome_trace(timeline_, path("a.json"));  // overwriting replaces, not appends
  EXPECT_EQ(read_file(path("a.json")), read_file(path("b.json")));
}

TEST_F(ReportsTest, TraceIntoMissingDirectoryThrowsAndCreatesNothing) {
  const std::string missing = path("no/such/dir/run.json");
  try {
    write_chrome_trace(timeline_, missing);
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot write " + missing + ": No such file or directory");
  }
  EXPECT_FALSE(fs::exists(path("no")));
}

TEST_F(ReportsTest, TraceOfBadSpanLeavesNoTemporary) {
  timeline_.spans.push_back({5, 0, 0, 0, 1});  // rank 5 does not exist
  EXPECT_THROW(write_chrome_trace(timeline_, path("bad.json")), std::runtime_error);
  EXPECT_TRUE(fs::is_empty(dir_));
}

}  // namespace
}  // namespace clustersim
