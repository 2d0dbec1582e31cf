// Writes a Timeline as a Chrome / Perfetto JSON trace (chrome://tracing, ui.perfetto.dev).
//
// One process per rank (pid = rank), one thread per stream (tid = stream index), one
// complete ("X") event per span. Times are printed exactly from integer picoseconds as
// microseconds with up to six fractional digits, so the same Timeline always produces the
// same bytes.
#pragma once

#include <string>

#include "plan/timeline.h"
#include "reports/sqlite_writer.h"

namespace clustersim {

// Writes `path` atomically (through `path + ".tmp"` and a rename). Throws
// std::runtime_error("cannot write PATH: ...") on failure, leaving no temporary behind.
// Requires t.plan; spans must refer to ranks, ops and streams of the plan.
void write_chrome_trace(const Timeline& t, const std::string& path);

// An inference-serving run: one process per replica, an "iteration" event per
// iteration (requests, prefill and decode tokens) and a `kv_blocks_used` counter.
void write_serving_trace(const ServingRecord& r, const std::string& path);

// Picoseconds as decimal microseconds: 1234567 -> "1.234567", 1500000 -> "1.5",
// 2000000 -> "2". Exposed for tests and other writers that need the same format.
std::string format_ps_as_us(int64_t ps);

}  // namespace clustersim
