// Writes a Timeline into a SQLite database, the system of record for runs (sim and real).
//
// One database holds many runs: each call appends a new run (a fresh run_id) and never
// touches earlier ones, so sweeps and sim/real comparisons can live in one file. The
// whole run goes in inside one transaction, and its `runs.complete` flag flips to 1 only
// just before COMMIT, so a crash can never leave a half-written run that looks complete.
//
// Schema version: PRAGMA user_version = 2 (kSqliteSchemaVersion). A file that is not a
// SQLite database, or carries another user_version, is refused rather than modified.
#pragma once

#include <string>
#include <vector>

#include "plan/timeline.h"

struct sqlite3;

namespace clustersim {

inline constexpr int kSqliteSchemaVersion = 2;

// Appends `t` as one new run to the database at `path`, creating the file and schema when
// absent. Throws std::runtime_error("cannot write PATH: ...") on any failure; then the
// database is exactly as it was before (a file this call created is removed).
// Requires t.plan; spans and link usage must refer to ranks, ops, streams and links that
// exist in the plan / timeline.
void write_sqlite(const Timeline& t, const std::string& path);

// An inference-serving run: one row per request and one per replica iteration (its
// batch, and the KV blocks in use: KV utilization over time).
struct RequestRow {
  int replica = 0;
  double arrival_s = 0, first_token_s = 0, finish_s = 0;
  int64_t prompt_tokens = 0, output_tokens = 0;
  int preemptions = 0;
};
struct IterationRow {
  int replica = 0;
  double start_s = 0, end_s = 0;
  int64_t requests = 0, prefill_tokens = 0, decode_tokens = 0, kv_blocks_used = 0, kv_blocks = 0;
};
struct ServingRecord {
  RunInfo run;  // kind "inference"
  std::vector<RequestRow> requests;
  std::vector<IterationRow> iterations;
};
void write_sqlite(const ServingRecord& r, const std::string& path);

// Sweep and search results: the table `sweep_results`, one row per point, written as each
// point finishes (one transaction each), so an interrupted sweep resumes where it
// stopped. A point is identified by the fingerprint of the scenario it varies and its
// settings.
struct SweepRow {
  std::string sweep, fingerprint;
  int64_t point = 0;
  std::string settings;
  std::string status;  // ok | invalid | error
  std::string reason;
  std::string objective;
  double value = 0;
  std::string metrics_json;
};
class SweepStore {
 public:
  explicit SweepStore(const std::string& path);  // creates the file and schema when absent
  ~SweepStore();
  SweepStore(const SweepStore&) = delete;
  SweepStore& operator=(const SweepStore&) = delete;
  bool find(const std::string& fingerprint, const std::string& settings, SweepRow& out);
  void put(const SweepRow& row);
  // In one transaction: every row of `fingerprint` removed (none when empty), then `rows`
  // written; a search's rerun replaces its ranking whole.
  void replace(const std::string& fingerprint, const std::vector<SweepRow>& rows);

 private:
  std::string path_;
  sqlite3* db_ = nullptr;
};

}  // namespace clustersim
