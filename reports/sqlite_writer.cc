#include "reports/sqlite_writer.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "reports/output_file.h"

namespace clustersim {
namespace {

// 'ClSi': tells our databases apart from other SQLite files that also use user_version.
constexpr int32_t kApplicationId = 0x436c5369;

// Tables use CREATE ... IF NOT EXISTS so re-running the DDL on an existing version-1
// database is harmless (and restores an index someone dropped).
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS runs (
  run_id        INTEGER PRIMARY KEY AUTOINCREMENT,
  name          TEXT NOT NULL,
  source        TEXT NOT NULL CHECK (source IN ('sim', 'real')),
  kind          TEXT NOT NULL,
  network_model TEXT NOT NULL,
  seed          INTEGER NOT NULL,
  scenario_yaml TEXT NOT NULL,
  complete      INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS requests (
  run_id        INTEGER NOT NULL REFERENCES runs(run_id),
  request_id    INTEGER NOT NULL,
  replica       INTEGER NOT NULL,
  arrival_s     REAL NOT NULL,
  first_token_s REAL NOT NULL,
  finish_s      REAL NOT NULL,
  prompt_tokens INTEGER NOT NULL,
  output_tokens INTEGER NOT NULL,
  preemptions   INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS iterations (
  run_id         INTEGER NOT NULL REFERENCES runs(run_id),
  replica        INTEGER NOT NULL,
  start_s        REAL NOT NULL,
  end_s          REAL NOT NULL,
  requests       INTEGER NOT NULL,
  prefill_tokens INTEGER NOT NULL,
  decode_tokens  INTEGER NOT NULL,
  kv_blocks_used INTEGER NOT NULL,
  kv_blocks      INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS metrics (
  run_id INTEGER NOT NULL REFERENCES runs(run_id),
  key    TEXT NOT NULL,
  value  REAL
);
CREATE TABLE IF NOT EXISTS ranks (
  run_id    INTEGER NOT NULL REFERENCES runs(run_id),
  rank      INTEGER NOT NULL,
  node      INTEGER NOT NULL,
  local_gpu INTEGER NOT NULL,
  device    TEXT NOT NULL,
  program   INTEGER NOT NULL,
  mirror_of INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS groups (
  run_id   INTEGER NOT NULL REFERENCES runs(run_id),
  group_id INTEGER NOT NULL,
  kind     TEXT NOT NULL,
  size     INTEGER NOT NULL,
  ranks    TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS ops (
  run_id        INTEGER NOT NULL REFERENCES runs(run_id),
  program       INTEGER NOT NULL,
  op_index      INTEGER NOT NULL,
  name          TEXT NOT NULL,
  kind          TEXT NOT NULL,
  stream        TEXT NOT NULL,
  phase         TEXT NOT NULL,
  layer         INTEGER NOT NULL,
  micro_batch   INTEGER NOT NULL,
  dtype         TEXT NOT NULL,
  m             INTEGER NOT NULL,
  n             INTEGER NOT NULL,
  k             INTEGER NOT NULL,
  batch         INTEGER NOT NULL,
  heads         INTEGER NOT NULL,
  kv_heads      INTEGER NOT NULL,
  q_len         INTEGER NOT NULL,
  kv_len        INTEGER NOT NULL,
  head_dim      INTEGER NOT NULL,
  causal        INTEGER NOT NULL,
  bytes_read    INTEGER NOT NULL,
  bytes_written INTEGER NOT NULL,
  bytes         INTEGER NOT NULL,
  collective    TEXT,
  grp           TEXT,
  peer          INTEGER,
  flops         REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS spans (
  run_id   INTEGER NOT NULL REFERENCES runs(run_id),
  rank     INTEGER NOT NULL,
  stream   TEXT NOT NULL,
  op_index INTEGER NOT NULL,
  name     TEXT NOT NULL,
  kind     TEXT NOT NULL,
  start_ps INTEGER NOT NULL,
  end_ps   INTEGER NOT NULL,
  bytes    INTEGER NOT NULL,
  flops    REAL NOT NULL,
  source   TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS links (
  run_id        INTEGER NOT NULL REFERENCES runs(run_id),
  link_id       INTEGER NOT NULL,
  src           TEXT NOT NULL,
  dst           TEXT NOT NULL,
  kind          TEXT NOT NULL,
  bandwidth_Bps REAL NOT NULL,
  latency_s     REAL NOT NULL
);
-- One collective phase's load: `bytes` on each of `links` (a JSON array of link ids,
-- ascending) over [start_ps, end_ps). The view link_usage gives one row per link.
CREATE TABLE IF NOT EXISTS link_loads (
  run_id   INTEGER NOT NULL REFERENCES runs(run_id),
  load_id  INTEGER NOT NULL,
  start_ps INTEGER NOT NULL,
  end_ps   INTEGER NOT NULL,
  bytes    REAL NOT NULL,
  links    TEXT NOT NULL,
  PRIMARY KEY (run_id, load_id)
) WITHOUT ROWID;
-- run --samples N: every seeded draw's metrics (long format, like metrics).
CREATE TABLE IF NOT EXISTS samples (
  run_id INTEGER NOT NULL REFERENCES runs(run_id),
  sample INTEGER NOT NULL,
  seed   INTEGER NOT NULL,
  key    TEXT NOT NULL,
  value  REAL
);
-- A training run with faults: its fault timeline over the job's wall-clock duration.
CREATE TABLE IF NOT EXISTS faults (
  run_id    INTEGER NOT NULL REFERENCES runs(run_id),
  start_s   REAL NOT NULL,
  end_s     REAL NOT NULL,
  kind      TEXT NOT NULL CHECK (kind IN ('failure', 'restart', 'checkpoint', 'lost')),
  component TEXT
);
-- Sweep and search points: one row per (configuration, point settings); metrics as a
-- JSON object (json_extract(metrics, '$.mfu')).
CREATE TABLE IF NOT EXISTS sweep_results (
  sweep       TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  point       INTEGER NOT NULL,
  settings    TEXT NOT NULL,
  status      TEXT NOT NULL CHECK (status IN ('ok', 'invalid', 'error')),
  reason      TEXT,
  objective   TEXT,
  value       REAL,
  metrics     TEXT,
  PRIMARY KEY (fingerprint, settings)
);
CREATE INDEX IF NOT EXISTS metrics_by_run ON metrics(run_id, key);
CREATE INDEX IF NOT EXISTS samples_by_run ON samples(run_id, key, sample);
CREATE INDEX IF NOT EXISTS ranks_by_rank ON ranks(run_id, rank);
CREATE INDEX IF NOT EXISTS groups_by_id ON groups(run_id, group_id);
CREATE INDEX IF NOT EXISTS ops_by_op ON ops(run_id, program, op_index);
CREATE INDEX IF NOT EXISTS spans_by_rank_time ON spans(run_id, rank, start_ps);
CREATE INDEX IF NOT EXISTS links_by_id ON links(run_id, link_id);
-- Spans with their op's phase / layer / micro-batch and duration, for reports.
CREATE VIEW IF NOT EXISTS span_view AS
  SELECT s.run_id, s.rank, s.stream, s.op_index, s.name, s.kind, o.phase, o.layer,
         o.micro_batch, s.start_ps, s.end_ps, s.end_ps - s.start_ps AS dur_ps,
         s.bytes, s.flops, s.source
  FROM spans s
  JOIN ranks r ON r.run_id = s.run_id AND r.rank = s.rank
  JOIN ops o ON o.run_id = s.run_id AND o.program = r.program AND o.op_index = s.op_index;
-- Per link and interval, utilization = bytes / (seconds x the link's bandwidth).
CREATE VIEW IF NOT EXISTS link_usage AS
  SELECT u.run_id, CAST(j.value AS INTEGER) AS link_id, u.start_ps, u.end_ps, u.bytes,
         CASE WHEN u.end_ps = u.start_ps THEN 0.0
              WHEN l.bandwidth_Bps > 0 THEN u.bytes / ((u.end_ps - u.start_ps) * 1e-12 * l.bandwidth_Bps)
         END AS utilization
  FROM link_loads u
  JOIN json_each(u.links) j
  LEFT JOIN links l ON l.run_id = u.run_id AND l.link_id = j.value;
)sql";

// Carries a message up to write_sqlite, which prefixes "cannot write PATH: ".
struct WriteError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void fail_sqlite(sqlite3* db, std::string_view what) {
  const int code = sqlite3_errcode(db);
  std::string msg(what);
  if (code == SQLITE_NOTADB || code == SQLITE_CORRUPT) {
    msg = "it is damaged or not a SQLite database (SQLite: " + std::string(sqlite3_errmsg(db)) + "); it was left as it was";
  } else {
    msg += msg.empty() ? "" : ": ";
    msg += sqlite3_errmsg(db);
  }
  throw WriteError(msg);
}

void exec(sqlite3* db, const char* sql) {
  if (sqlite3_exec(db, sql, nullptr, nullptr, nullptr) != SQLITE_OK) fail_sqlite(db, "");
}

// A prepared statement reused for every row: bind the columns in order, then insert().
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s_, nullptr) != SQLITE_OK) fail_sqlite(db, "");
  }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& i(int64_t v) { return check(sqlite3_bind_int64(s_, next_++, v)); }
  Stmt& d(double v) { return check(sqlite3_bind_double(s_, next_++, v)); }
  Stmt& null() { return check(sqlite3_bind_null(s_, next_++)); }
  // The text must stay alive until the row is inserted (SQLITE_STATIC avoids a copy per
  // row, which matters at a million spans); temporaries go through text_copy.
  Stmt& t(std::string_view v) {
    return check(sqlite3_bind_text64(s_, next_++, v.data(), v.size(), SQLITE_STATIC, SQLITE_UTF8));
  }
  Stmt& text_copy(std::string_view v) {
    return check(sqlite3_bind_text64(s_, next_++, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
  }

  void insert() {
    if (sqlite3_step(s_) != SQLITE_DONE) fail_sqlite(db_, "");
    sqlite3_reset(s_);
    next_ = 1;
  }

  // For single-value queries: steps once and returns column 0 as an integer.
  int64_t query_int() {
    if (sqlite3_step(s_) != SQLITE_ROW) fail_sqlite(db_, "");
    const int64_t v = sqlite3_column_int64(s_, 0);
    sqlite3_reset(s_);
    next_ = 1;
    return v;
  }

 private:
  Stmt& check(int rc) {
    if (rc != SQLITE_OK) fail_sqlite(db_, "");
    return *this;
  }
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  int next_ = 1;
};

// FLOPs an op performs: the planner's figure when it set one, else the closed form.
double op_flops(const Op& op) {
  if (op.flops > 0) return op.flops;
  if (op.kind == OpKind::Gemm) return gemm_flops(op);
  if (op.kind == OpKind::Attention) return attention_flops(op);
  return 0;
}

// Bytes a span moves: the message for communication, HBM traffic for everything else.
int64_t op_bytes(const Op& op) { return is_comm(op.kind) ? op.bytes : op.bytes_read + op.bytes_written; }

// Checked before the file is touched, so bad input never creates or locks a database.
void validate(const Timeline& t) {
  if (t.plan == nullptr) throw WriteError("timeline has no plan");
  const Plan& plan = *t.plan;
  if (t.run.source != "sim" && t.run.source != "real")
    throw WriteError("run source must be 'sim' or 'real', got '" + t.run.source + "'");
  for (const Program& p : plan.programs)
    for (const Op& op : p.ops) {
      if (op.name >= plan.names.size()) throw WriteError("program '" + p.name + "' has an op with no name");
      if (op.stream >= p.streams.size()) throw WriteError("program '" + p.name + "' has an op on no stream");
    }
  for (const SpanRecord& s : t.spans) {
    if (s.rank < 0 || static_cast<size_t>(s.rank) >= plan.rank_program.size())
      throw WriteError("span of unknown rank " + std::to_string(s.rank));
    const uint32_t prog = plan.rank_program[static_cast<size_t>(s.rank)];
    if (prog >= plan.programs.size()) throw WriteError("rank " + std::to_string(s.rank) + " has no program");
    const Program& p = plan.programs[prog];
    if (s.op >= p.ops.size() || s.stream >= p.streams.size())
      throw WriteError("span of rank " + std::to_string(s.rank) + " names op " + std::to_string(s.op) + " / stream " +
                       std::to_string(s.stream) + " missing from its program");
  }
}

// Refuses foreign files and other schema versions; creates the schema in a fresh file.
// Runs inside the write transaction so two writers cannot both create the schema.
void ensure_schema(sqlite3* db) {
  const int64_t version = Stmt(db, "PRAGMA user_version").query_int();
  const int64_t app_id = Stmt(db, "PRAGMA application_id").query_int();
  if (version == 0) {
    if (Stmt(db, "SELECT count(*) FROM sqlite_master").query_int() != 0)
      throw WriteError("not a clustersim database (it has tables but no clustersim schema version)");
    exec(db, kSchema);
    exec(db, ("PRAGMA user_version = " + std::to_string(kSqliteSchemaVersion)).c_str());
    exec(db, ("PRAGMA application_id = " + std::to_string(kApplicationId)).c_str());
    return;
  }
  if (app_id != 0 && app_id != kApplicationId)
    throw WriteError("not a clustersim database (application_id " + std::to_string(app_id) + ")");
  if (version != kSqliteSchemaVersion)
    throw WriteError("incompatible clustersim database: schema version " + std::to_string(version) +
                     ", this build writes version " + std::to_string(kSqliteSchemaVersion));
  exec(db, kSchema);
}

int64_t insert_run(sqlite3* db, const RunInfo& run) {
  Stmt s(db,
         "INSERT INTO runs (name, source, kind, network_model, seed, scenario_yaml, complete) "
         "VALUES (?, ?, ?, ?, ?, ?, 0)");
  // A seed above 2^63 is stored as its two's-complement int64 (SQLite has no uint64).
  s.t(run.name).t(run.source).t(run.kind).t(run.network_model).i(static_cast<int64_t>(run.seed));
  s.t(run.scenario_yaml).insert();
  return sqlite3_last_insert_rowid(db);
}

void insert_plan(sqlite3* db, int64_t run_id, const Plan& plan) {
  {
    Stmt s(db, "INSERT INTO groups (run_id, group_id, kind, size, ranks) VALUES (?, ?, ?, ?, ?)");
    for (size_t g = 0; g < plan.groups.size(); ++g) {
      const Group& grp = plan.groups[g];
      std::string csv;
      for (size_t r = 0; r < grp.ranks.size(); ++r) {
        if (r) csv += ',';
        csv += std::to_string(grp.ranks[r]);
      }
      s.i(run_id).i(static_cast<int64_t>(g)).t(to_string(grp.kind)).i(static_cast<int64_t>(grp.ranks.size()));
      s.text_copy(csv).insert();
    }
  }
  Stmt s(db,
         "INSERT INTO ops (run_id, program, op_index, name, kind, stream, phase, layer, micro_batch, dtype, "
         "m, n, k, batch, heads, kv_heads, q_len, kv_len, head_dim, causal, bytes_read, bytes_written, "
         "bytes, collective, grp, peer, flops) "
         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  for (size_t p = 0; p < plan.programs.size(); ++p) {
    const Program& prog = plan.programs[p];
    for (size_t o = 0; o < prog.ops.size(); ++o) {
      const Op& op = prog.ops[o];
      s.i(run_id).i(static_cast<int64_t>(p)).i(static_cast<int64_t>(o)).t(plan.names[op.name]);
      s.t(to_string(op.kind)).t(prog.streams[op.stream]).t(to_string(op.phase)).i(op.layer).i(op.micro_batch);
      s.t(to_string(op.dtype)).i(op.m).i(op.n).i(op.k).i(op.batch).i(op.heads).i(op.kv_heads);
      s.i(op.q_len).i(op.kv_len).i(op.head_dim).i(op.causal ? 1 : 0).i(op.bytes_read).i(op.bytes_written);
      s.i(op.bytes);
      if (op.kind == OpKind::Collective)
        s.t(to_string(op.collective));
      else
        s.null();
      if (is_comm(op.kind))
        s.t(to_string(op.group));
      else
        s.null();
      if (op.kind == OpKind::Send || op.kind == OpKind::Recv)
        s.i(op.peer);
      else
        s.null();
      s.d(op_flops(op)).insert();
    }
  }
}

// What a span row repeats from its op; computed once per op, not once per span.
struct OpRow {
  std::string_view name, kind;
  int64_t bytes = 0;
  double flops = 0;
};

void insert_spans(sqlite3* db, int64_t run_id, const Timeline& t) {
  const Plan& plan = *t.plan;
  std::vector<std::vector<OpRow>> rows(plan.programs.size());
  for (size_t p = 0; p < plan.programs.size(); ++p)
    for (const Op& op : plan.programs[p].ops)
      rows[p].push_back({plan.names[op.name], to_string(op.kind), op_bytes(op), op_flops(op)});

  Stmt s(db,
         "INSERT INTO spans (run_id, rank, stream, op_index, name, kind, start_ps, end_ps, bytes, flops, source) "
         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  // Rows keep Timeline order, so rowid order is the order the executor recorded.
  for (const SpanRecord& span : t.spans) {
    const uint32_t prog = plan.rank_program[static_cast<size_t>(span.rank)];
    const OpRow& r = rows[prog][span.op];
    s.i(run_id).i(span.rank).t(plan.programs[prog].streams[span.stream]).i(span.op).t(r.name).t(r.kind);
    s.i(span.start_ps).i(span.end_ps).i(r.bytes).d(r.flops).t(t.run.source).insert();
  }
}

void insert_links(sqlite3* db, int64_t run_id, const Timeline& t) {
  std::unordered_map<uint32_t, double> bandwidth;
  {
    Stmt s(db,
           "INSERT INTO links (run_id, link_id, src, dst, kind, bandwidth_Bps, latency_s) "
           "VALUES (?, ?, ?, ?, ?, ?, ?)");
    for (const LinkInfo& l : t.links) {
      s.i(run_id).i(l.id).t(l.src).t(l.dst).t(l.kind).d(l.bandwidth_Bps).d(l.latency_s).insert();
      bandwidth[l.id] = l.bandwidth_Bps;
    }
  }
  // A collective phase loads many links with the same bytes over the same interval: one
  // row per load with its link ids; the link_usage view expands them (utilization from
  // links).
  Stmt s(db, "INSERT INTO link_loads (run_id, load_id, start_ps, end_ps, bytes, links) VALUES (?, ?, ?, ?, ?, ?)");
  int64_t load = 0;
  std::string ids;
  const LinkLoads& usage = t.usage();
  for (const LinkLoad& u : usage.loads()) {
    ids = "[";
    bool first = true;
    for (uint32_t k : usage.links(u)) {
      if (!bandwidth.count(k)) throw WriteError("link usage of unknown link " + std::to_string(k));
      if (!first) ids += ',';
      first = false;
      ids += std::to_string(k);
    }
    ids += ']';
    s.i(run_id).i(load++).i(u.start_ps).i(u.end_ps).d(u.bytes).text_copy(ids).insert();
  }
}

void insert_run_rows(sqlite3* db, int64_t run_id, const Timeline& t) {
  {
    Stmt s(db,
           "INSERT INTO ranks (run_id, rank, node, local_gpu, device, program, mirror_of) "
           "VALUES (?, ?, ?, ?, ?, ?, ?)");
    for (const RankInfo& r : t.ranks)
      s.i(run_id).i(r.rank).i(r.node).i(r.local_gpu).t(r.device).i(r.program).i(r.mirror_of).insert();
  }
  insert_plan(db, run_id, *t.plan);
  insert_spans(db, run_id, t);
  insert_links(db, run_id, t);
}

// Owns the connection; closing rolls back whatever transaction is still open.
struct Connection {
  sqlite3* db = nullptr;
  ~Connection() {
    if (db && !sqlite3_get_autocommit(db)) sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_close_v2(db);
  }
};

template <typename Rows>
void write_or_throw(const RunInfo& run, const std::string& path, bool create, Rows rows) {
  Connection c;
  // NOMUTEX: the connection never leaves this call, so SQLite's per-call locking is waste.
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (create ? SQLITE_OPEN_CREATE : 0);
  if (sqlite3_open_v2(path.c_str(), &c.db, flags, nullptr) != SQLITE_OK) {
    if (c.db == nullptr) throw WriteError("out of memory");
    fail_sqlite(c.db, "cannot open");
  }
  sqlite3_extended_result_codes(c.db, 1);
  // Sweeps append from several processes into one file: wait for the lock, don't fail.
  sqlite3_busy_timeout(c.db, 30000);
  exec(c.db, "PRAGMA synchronous = NORMAL");
  exec(c.db, "PRAGMA cache_size = -65536");  // 64 MiB: keeps the span index in memory while inserting
  exec(c.db, "BEGIN IMMEDIATE");
  ensure_schema(c.db);
  const int64_t run_id = insert_run(c.db, run);
  {
    Stmt s(c.db, "INSERT INTO metrics (run_id, key, value) VALUES (?, ?, ?)");
    for (const auto& [key, value] : run.metrics) s.i(run_id).t(key).d(value).insert();
  }
  if (!run.samples.empty()) {
    Stmt s(c.db, "INSERT INTO samples (run_id, sample, seed, key, value) VALUES (?, ?, ?, ?, ?)");
    for (const SampleValue& v : run.samples)
      s.i(run_id).i(v.sample).i(static_cast<int64_t>(v.seed)).t(v.key).d(v.value).insert();
  }
  if (!run.faults.empty()) {
    Stmt s(c.db, "INSERT INTO faults (run_id, start_s, end_s, kind, component) VALUES (?, ?, ?, ?, ?)");
    for (const FaultSpan& f : run.faults) s.i(run_id).d(f.start_s).d(f.end_s).t(f.kind).t(f.component).insert();
  }
  // Into empty tables, the rows go in first and their indexes are built after, in one
  // sorted pass each, instead of updating a b-tree at every insert (a third of the
  // writer's time at a million rows). Same transaction: a failure rolls the drop back.
  bool deferred = false;
  if (Stmt(c.db, "SELECT NOT EXISTS (SELECT 1 FROM spans)").query_int()) {
    exec(c.db, "DROP INDEX IF EXISTS spans_by_rank_time");
    deferred = true;
  }
  rows(c.db, run_id);
  if (deferred) exec(c.db, kSchema);  // IF NOT EXISTS: creates just the dropped indexes
  {
    Stmt done(c.db, "UPDATE runs SET complete = 1 WHERE run_id = ?");
    done.i(run_id).insert();
  }
  exec(c.db, "COMMIT");
}

void insert_serving_rows(sqlite3* db, int64_t run_id, const ServingRecord& r) {
  {
    Stmt s(db,
           "INSERT INTO requests (run_id, request_id, replica, arrival_s, first_token_s, finish_s, prompt_tokens, "
           "output_tokens, preemptions) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
    for (size_t i = 0; i < r.requests.size(); ++i) {
      const RequestRow& q = r.requests[i];
      s.i(run_id).i(static_cast<int64_t>(i)).i(q.replica).d(q.arrival_s).d(q.first_token_s).d(q.finish_s);
      s.i(q.prompt_tokens).i(q.output_tokens).i(q.preemptions).insert();
    }
  }
  {
    Stmt s(db,
           "INSERT INTO iterations (run_id, replica, start_s, end_s, requests, prefill_tokens, decode_tokens, "
           "kv_blocks_used, kv_blocks) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
    for (const IterationRow& it : r.iterations) {
      s.i(run_id).i(it.replica).d(it.start_s).d(it.end_s).i(it.requests).i(it.prefill_tokens).i(it.decode_tokens);
      s.i(it.kv_blocks_used).i(it.kv_blocks).insert();
    }
  }
}

// Runs `write(file, create)` against `path`; a file this call created is removed again on
// failure. `fresh`: a new database is built under a temporary name beside `path` and moved
// into place once committed, so an interrupt (which removes the registered temporaries)
// leaves neither a half-written database nor its journal, which a later run would refuse as
// not a database; an existing one is appended to in place, its journal keeping it whole.
template <typename Write>
void write_file(const std::string& path, Write write, bool fresh = false) {
  namespace fs = std::filesystem;
  // A database is written in place (SQLite's journal keeps it whole), so it must be a
  // regular file or a new path: never a device, a FIFO or a directory.
  if (const std::string why = output_path_problem(path); !why.empty())
    throw std::runtime_error("cannot write " + path + ": it is " + why + ", expected a database file or a new path");
  std::error_code ec;
  const bool existed = fs::exists(fs::symlink_status(path, ec));
  std::string file = path, temp;
  std::vector<TempRegistration> registered;
  bool ours = !existed;  // a file this call made, removed again on failure
  auto remove_all = [&](const std::string& base) {
    for (const char* suffix : {"", "-journal", "-wal", "-shm"}) fs::remove(base + suffix, ec);
  };
  if (fresh && !existed) {
    ::close(create_temp_beside(path, path, temp, registered, {"", "-journal", "-wal", "-shm"}));
    file = temp;
  }
  try {
    write(file, !existed);
    if (!temp.empty()) {
      // Into place without replacing what may have appeared there meanwhile: a rename that
      // refuses an existing target, else (a file system without it) a hard link.
      int rc = ::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE);
      if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) {
        rc = ::link(temp.c_str(), path.c_str());
        if (rc == 0) {
          ::unlink(temp.c_str());
        } else if (errno != EEXIST && !fs::exists(fs::symlink_status(path, ec))) {
          rc = std::rename(temp.c_str(), path.c_str());  // neither: checked, then renamed (not atomic)
        }
      }
      if (rc != 0 && errno == EEXIST) {
        // Another run made it meanwhile (runs appending to one database): this run's rows
        // go in beside theirs.
        remove_all(temp);
        temp.clear();
        registered.clear();
        ours = false;
        write(path, false);
      } else if (rc != 0) {
        throw WriteError(std::strerror(errno));
      }
    }
  } catch (const std::exception& e) {
    if (!temp.empty())
      remove_all(temp);
    else if (ours)
      remove_all(path);  // nothing of ours may survive a failed first write
    throw std::runtime_error("cannot write " + path + ": " + e.what());
  }
}

}  // namespace

void write_sqlite(const Timeline& t, const std::string& path) {
  write_file(
      path,
      [&](const std::string& file, bool create) {
        validate(t);
        write_or_throw(t.run, file, create, [&](sqlite3* db, int64_t run_id) { insert_run_rows(db, run_id, t); });
      },
      /*fresh=*/true);
}

SweepStore::SweepStore(const std::string& path) : path_(path) {
  write_file(path, [&](const std::string&, bool create) {
    const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (create ? SQLITE_OPEN_CREATE : 0);
    if (sqlite3_open_v2(path.c_str(), &db_, flags, nullptr) != SQLITE_OK) {
      if (db_ == nullptr) throw WriteError("out of memory");
      sqlite3* db = db_;
      db_ = nullptr;
      try {
        fail_sqlite(db, "cannot open");
      } catch (...) {
        sqlite3_close_v2(db);
        throw;
      }
    }
    try {
      sqlite3_extended_result_codes(db_, 1);
      sqlite3_busy_timeout(db_, 30000);
      exec(db_, "BEGIN IMMEDIATE");
      ensure_schema(db_);
      exec(db_, "COMMIT");
    } catch (...) {
      if (!sqlite3_get_autocommit(db_)) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      sqlite3_close_v2(db_);
      db_ = nullptr;
      throw;
    }
  });
}

SweepStore::~SweepStore() { sqlite3_close_v2(db_); }

bool SweepStore::find(const std::string& fingerprint, const std::string& settings, SweepRow& out) {
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db_,
                     "SELECT sweep, point, status, reason, objective, value, metrics FROM sweep_results "
                     "WHERE fingerprint = ? AND settings = ?",
                     -1, &st, nullptr);
  sqlite3_bind_text(st, 1, fingerprint.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 2, settings.c_str(), -1, SQLITE_TRANSIENT);
  const bool found = sqlite3_step(st) == SQLITE_ROW;
  if (found) {
    auto text = [&](int col) {
      const unsigned char* t = sqlite3_column_text(st, col);
      return t ? std::string(reinterpret_cast<const char*>(t)) : std::string();
    };
    out.sweep = text(0);
    out.fingerprint = fingerprint;
    out.point = sqlite3_column_int64(st, 1);
    out.settings = settings;
    out.status = text(2);
    out.reason = text(3);
    out.objective = text(4);
    out.value = sqlite3_column_double(st, 5);
    out.metrics_json = text(6);
  }
  sqlite3_finalize(st);
  return found;
}

namespace {
void insert_sweep_row(sqlite3* db, const SweepRow& r) {
  Stmt s(db,
         "INSERT OR REPLACE INTO sweep_results (sweep, fingerprint, point, settings, status, reason, objective, "
         "value, metrics) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
  s.t(r.sweep).t(r.fingerprint).i(r.point).t(r.settings).t(r.status).t(r.reason).t(r.objective);
  if (r.status == "ok")
    s.d(r.value);
  else
    s.null();
  s.t(r.metrics_json).insert();
}
}  // namespace

void SweepStore::put(const SweepRow& r) { replace(std::string(), {r}); }

void SweepStore::replace(const std::string& fingerprint, const std::vector<SweepRow>& rows) {
  try {
    exec(db_, "BEGIN IMMEDIATE");
    if (!fingerprint.empty()) {
      Stmt del(db_, "DELETE FROM sweep_results WHERE fingerprint = ?");
      del.t(fingerprint).insert();
    }
    for (const SweepRow& r : rows) insert_sweep_row(db_, r);
    exec(db_, "COMMIT");
  } catch (const std::exception& e) {
    if (!sqlite3_get_autocommit(db_)) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw std::runtime_error("cannot write " + path_ + ": " + e.what());
  }
}

void write_sqlite(const ServingRecord& r, const std::string& path) {
  write_file(
      path,
      [&](const std::string& file, bool create) {
        write_or_throw(r.run, file, create, [&](sqlite3* db, int64_t run_id) { insert_serving_rows(db, run_id, r); });
      },
      /*fresh=*/true);
}

}  // namespace clustersim
