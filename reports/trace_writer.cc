#include "reports/trace_writer.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "reports/output_file.h"

namespace clustersim {
namespace {

// Failures carry only the reason; write_chrome_trace adds "cannot write PATH: ".
struct TraceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// strerror is not thread-safe; sweeps write traces from several threads.
std::string errno_message() { return std::error_code(errno, std::generic_category()).message(); }

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// Collects output in memory and hands it to the file in large blocks: one fwrite per
// megabyte instead of one per event keeps a million spans well under a second.
class JsonOut {
 public:
  explicit JsonOut(std::FILE* f) : f_(f) { buf_.reserve(kFlushAt + 4096); }

  JsonOut& raw(std::string_view s) {
    buf_.append(s);
    if (buf_.size() >= kFlushAt) flush();
    return *this;
  }
  JsonOut& num(int64_t v) {
    char tmp[24];
    const auto r = std::to_chars(tmp, tmp + sizeof tmp, v);
    return raw(std::string_view(tmp, static_cast<size_t>(r.ptr - tmp)));
  }
  // Shortest round-trip form: exact, locale-free and identical on every run.
  JsonOut& num(double v) {
    if (!std::isfinite(v)) return raw("null");  // JSON has no NaN / Infinity
    char tmp[32];
    const auto r = std::to_chars(tmp, tmp + sizeof tmp, v);
    return raw(std::string_view(tmp, static_cast<size_t>(r.ptr - tmp)));
  }
  JsonOut& str(std::string_view s) {
    buf_ += '"';
    for (char ch : s) {
      const auto c = static_cast<unsigned char>(ch);
      switch (c) {
        case '"':
          buf_ += "\\\"";
          break;
        case '\\':
          buf_ += "\\\\";
          break;
        case '\n':
          buf_ += "\\n";
          break;
        case '\r':
          buf_ += "\\r";
          break;
        case '\t':
          buf_ += "\\t";
          break;
        case '\b':
          buf_ += "\\b";
          break;
        case '\f':
          buf_ += "\\f";
          break;
        default:
          if (c < 0x20) {
            static constexpr char kHex[] = "0123456789abcdef";
            buf_ += "\\u00";
            buf_ += kHex[c >> 4];
            buf_ += kHex[c & 0xf];
          } else {
            buf_ += ch;  // bytes >= 0x80 pass through: names are UTF-8
          }
      }
    }
    return raw("\"");
  }

  void flush() {
    if (!buf_.empty() && std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size()) throw TraceError(errno_message());
    buf_.clear();
  }

 private:
  static constexpr size_t kFlushAt = size_t{1} << 20;
  std::FILE* f_;
  std::string buf_;
};

const Program& program_of(const Plan& plan, int32_t rank) {
  if (rank < 0 || static_cast<size_t>(rank) >= plan.rank_program.size())
    throw TraceError("span of unknown rank " + std::to_string(rank));
  const uint32_t p = plan.rank_program[static_cast<size_t>(rank)];
  if (p >= plan.programs.size()) throw TraceError("rank " + std::to_string(rank) + " has no program");
  return plan.programs[p];
}

void write_metadata(JsonOut& out, const Timeline& t) {
  const Plan& plan = *t.plan;
  // Each metadata line ends in ",\n": they exist only for ranks with spans, so a span
  // always follows the last one.
  // Only ranks with spans get a process: mirrored ranks have none, and naming 16k empty
  // processes would bury the representatives in the viewer.
  std::vector<bool> has_spans(plan.rank_program.size(), false);
  for (const SpanRecord& s : t.spans) {
    program_of(plan, s.rank);  // validates the rank
    has_spans[static_cast<size_t>(s.rank)] = true;
  }
  std::vector<const RankInfo*> info(plan.rank_program.size(), nullptr);
  for (const RankInfo& r : t.ranks)
    if (r.rank >= 0 && static_cast<size_t>(r.rank) < info.size()) info[static_cast<size_t>(r.rank)] = &r;

  for (size_t rank = 0; rank < has_spans.size(); ++rank) {
    if (!has_spans[rank]) continue;
    const auto pid = static_cast<int64_t>(rank);
    std::string label = "rank " + std::to_string(rank);
    if (const RankInfo* r = info[rank])
      label += " (node " + std::to_string(r->node) + " gpu " + std::to_string(r->local_gpu) + ")";
    out.raw("{\"ph\":\"M\",\"pid\":").num(pid).raw(",\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":");
    out.str(label).raw("}},\n");
    out.raw("{\"ph\":\"M\",\"pid\":").num(pid).raw(",\"tid\":0,\"name\":\"process_sort_index\",\"args\":");
    out.raw("{\"sort_index\":").num(pid).raw("}},\n");
    const Program& prog = program_of(plan, static_cast<int32_t>(rank));
    for (size_t s = 0; s < prog.streams.size(); ++s) {
      const auto tid = static_cast<int64_t>(s);
      out.raw("{\"ph\":\"M\",\"pid\":").num(pid).raw(",\"tid\":").num(tid);
      out.raw(",\"name\":\"thread_name\",\"args\":{\"name\":").str(prog.streams[s]).raw("}},\n");
      out.raw("{\"ph\":\"M\",\"pid\":").num(pid).raw(",\"tid\":").num(tid);
      out.raw(",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":").num(tid).raw("}},\n");
    }
  }
}

void write_spans(JsonOut& out, const Timeline& t) {
  const Plan& plan = *t.plan;
  bool first = true;
  for (const SpanRecord& span : t.spans) {
    const Program& prog = program_of(plan, span.rank);
    if (span.op >= prog.ops.size() || span.stream >= prog.streams.size())
      throw TraceError("span of rank " + std::to_string(span.rank) + " names op " + std::to_string(span.op) +
                       " / stream " + std::to_string(span.stream) + " missing from its program");
    const Op& op = prog.ops[span.op];
    if (op.name >= plan.names.size()) throw TraceError("op " + std::to_string(span.op) + " has no name");
    const bool comm = is_comm(op.kind);
    double flops = op.flops;
    if (flops <= 0 && op.kind == OpKind::Gemm) flops = gemm_flops(op);
    if (flops <= 0 && op.kind == OpKind::Attention) flops = attention_flops(op);

    if (!first) out.raw(",\n");
    first = false;
    out.raw("{\"ph\":\"X\",\"name\":").str(plan.names[op.name]).raw(",\"cat\":").str(to_string(op.kind));
    out.raw(",\"pid\":").num(int64_t{span.rank}).raw(",\"tid\":").num(int64_t{span.stream});
    out.raw(",\"ts\":").raw(format_ps_as_us(span.start_ps));
    out.raw(",\"dur\":").raw(format_ps_as_us(span.end_ps - span.start_ps));
    out.raw(",\"args\":{\"op\":").num(int64_t{span.op}).raw(",\"layer\":").num(int64_t{op.layer});
    out.raw(",\"micro_batch\":").num(int64_t{op.micro_batch}).raw(",\"phase\":").str(to_string(op.phase));
    out.raw(",\"bytes\":").num(comm ? op.bytes : op.bytes_read + op.bytes_written);
    out.raw(",\"flops\":").num(flops).raw("}}");
  }
}

// Writes the trace whole or not at all (reports/output_file.h); `events` writes the events.
template <typename Events>
void write_trace_file(const std::string& path, Events events) {
  try {
    AtomicFile f(path);
    JsonOut out(f.file());
    out.raw("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
    events(out);
    out.raw("\n]}\n");
    out.flush();
    f.commit();
  } catch (const OutputError&) {
    throw;
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot write " + path + ": " + e.what());
  }
}

int64_t seconds_to_ps(double s) { return static_cast<int64_t>(std::llround(s * 1e12)); }

}  // namespace

std::string format_ps_as_us(int64_t ps) {
  // Integer arithmetic only: 1 us = 10^6 ps, so the fraction is exactly six digits.
  const uint64_t mag = ps < 0 ? 0 - static_cast<uint64_t>(ps) : static_cast<uint64_t>(ps);
  std::string s = ps < 0 ? "-" : "";
  s += std::to_string(mag / 1000000);
  uint64_t frac = mag % 1000000;
  if (frac != 0) {
    int digits = 6;
    while (frac % 10 == 0) {
      frac /= 10;
      --digits;
    }
    const std::string f = std::to_string(frac);
    s += '.';
    s.append(static_cast<size_t>(digits) - f.size(), '0');
    s += f;
  }
  return s;
}

// The fault timeline, as its own process on a wall-clock axis of whole microseconds
// (a day is 8.64e10 us; picoseconds would overflow past 106 days).
void write_faults(JsonOut& out, const std::vector<FaultSpan>& faults, const char* sep) {
  if (faults.empty()) return;
  constexpr int64_t kPid = 1 << 30;
  out.raw(sep).raw("{\"ph\":\"M\",\"pid\":").num(kPid).raw(",\"tid\":0,\"name\":\"process_name\",\"args\":");
  out.raw("{\"name\":\"faults (job wall clock)\"}}");
  for (const FaultSpan& f : faults) {
    const auto us = [](double s) { return std::to_string(std::llround(s * 1e6)); };
    out.raw(",\n{\"ph\":").raw(f.kind == "failure" ? "\"i\",\"s\":\"p\"" : "\"X\"");
    out.raw(",\"name\":").str(f.kind).raw(",\"cat\":\"fault\",\"pid\":").num(kPid).raw(",\"tid\":0");
    out.raw(",\"ts\":").raw(us(f.start_s));
    if (f.kind != "failure") out.raw(",\"dur\":").raw(us(f.end_s - f.start_s));
    out.raw(",\"args\":{\"component\":").str(f.component).raw("}}");
  }
}

void write_chrome_trace(const Timeline& t, const std::string& path) {
  write_trace_file(path, [&](JsonOut& out) {
    if (t.plan == nullptr) throw TraceError("timeline has no plan");
    write_metadata(out, t);
    write_spans(out, t);
    write_faults(out, t.run.faults, t.spans.empty() ? "" : ",\n");
  });
}

void write_serving_trace(const ServingRecord& r, const std::string& path) {
  write_trace_file(path, [&](JsonOut& out) {
    int replicas = 0;
    for (const IterationRow& it : r.iterations) replicas = std::max(replicas, it.replica + 1);
    const char* sep = "";
    for (int p = 0; p < replicas; ++p) {
      out.raw(sep).raw("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":").num(int64_t{p});
      out.raw(",\"args\":{\"name\":").str("replica " + std::to_string(p)).raw("}}");
      sep = ",\n";
    }
    // One complete event per iteration, and the KV blocks in use as a counter track.
    for (const IterationRow& it : r.iterations) {
      const int64_t start = seconds_to_ps(it.start_s), end = seconds_to_ps(it.end_s);
      out.raw(sep).raw("{\"name\":\"iteration\",\"ph\":\"X\",\"pid\":").num(int64_t{it.replica});
      out.raw(",\"tid\":0,\"ts\":").raw(format_ps_as_us(start)).raw(",\"dur\":").raw(format_ps_as_us(end - start));
      out.raw(",\"args\":{\"requests\":").num(it.requests).raw(",\"prefill_tokens\":").num(it.prefill_tokens);
      out.raw(",\"decode_tokens\":").num(it.decode_tokens).raw("}}");
      sep = ",\n";
      out.raw(sep).raw("{\"name\":\"kv_blocks_used\",\"ph\":\"C\",\"pid\":").num(int64_t{it.replica});
      out.raw(",\"ts\":").raw(format_ps_as_us(start)).raw(",\"args\":{\"used\":").num(it.kv_blocks_used).raw("}}");
    }
  });
}

}  // namespace clustersim
