// Writes a Timeline into a SQLite database, the system of record for runs (sim and real).
//
// One database holds many runs: each call appends a new run (a fresh run_id) and never
// touches earlier ones, so sweeps and sim/real comparisons can live in one file. The
// whole run goes in inside one transaction, and its `runs.complete` flag flips to 1 only
// just before COMMIT, so a crash can never leave a half-written run that looks complete.
//
// Schema version: PRAGMA user_version = 1 (kSqliteSchemaVersion). A file that is not a
// SQLite database, or carries another user_version, is refused rather than modified.
#pragma once

#include <string>

#include "reports/timeline.h"

namespace clustersim {

inline constexpr int kSqliteSchemaVersion = 1;

// Appends `t` as one new run to the database at `path`, creating the file and schema when
// absent. Throws std::runtime_error("cannot write PATH: ...") on any failure; then the
// database is exactly as it was before (a file this call created is removed).
// Requires t.plan; spans and link usage must refer to ranks, ops, streams and links that
// exist in the plan / timeline.
void write_sqlite(const Timeline& t, const std::string& path);

}  // namespace clustersim
