#include "sim/search.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

#include "cost_models/compute.h"
#include "cost_models/tuner.h"
#include "plan/memory.h"
#include "reports/progress.h"
#include "reports/summary.h"
#include "scenarios/error.h"
#include "sim/run.h"

namespace clustersim {
namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

SearchResult search_layouts(const Scenario& s, const SearchOptions& opt) {
  if (!s.model.blocks.empty())
    throw InputError(s.mark("model.blocks"), "search finds transformer layouts, not model.blocks (sweep its layouts instead)");
  // The search costs layers on clusters cut down from this one, node by node.
  if (!s.cluster.uniform())
    throw InputError(s.mark("cluster.topology_file"),
                     "search on a topology file of mixed nodes or an explicit fabric is not modelled, expected nodes "
                     "alike on a generated fabric (run or sweep the layouts instead)");
  if (s.inference)
    throw InputError(s.mark("inference"), "search finds training layouts, expected a scenario without inference:");
  if (!s.jobs.empty())
    throw InputError(s.mark("jobs"), "search finds one training job's layout, expected one job's scenario, not jobs:");
  if (!s.chakra_dir.empty())
    throw InputError(s.mark("workload"),
                     "search finds layouts of a model, and workload.chakra's traces fix theirs, expected model: and "
                     "parallel:");
  if (s.training.global_batch <= 0)
    throw InputError(s.mark("training"),
                     "search keeps the global batch fixed, expected training.global_batch to be set");
  const auto t0 = std::chrono::steady_clock::now();
  SearchResult res;
  res.name = s.name;
  const ModelConfig& m = s.model;
  const int64_t gpus = s.gpus();
  const int64_t gpn = s.cluster.node.gpus;
  const double hbm = s.cluster.node.gpu.hbm_bytes;
  LayoutEstimator est(s);

  // The scenario's own layout, when valid: always simulated, as the baseline.
  TrainingLayout baseline;
  bool have_baseline = false;
  try {
    baseline = check_training_layout(s);
    const auto mem = training_stage_memory(s, baseline);
    MemoryBreakdown peak;
    for (const auto& b : mem)
      if (b.total() > peak.total()) peak = b;
    if (peak.total() > hbm) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "does not fit in memory: %.1f GiB per GPU needed, %.1f GiB available (",
                    peak.total() / (1 << 30), hbm / (1 << 30));
      res.baseline_reason = buf + peak.describe() + ")";
    } else {
      have_baseline = true;
    }
  } catch (const InputError& e) {
    res.baseline_reason = e.what();
  }

  std::vector<std::pair<TrainingLayout, LayoutEstimate>> ranked;
  std::map<std::string, std::pair<int64_t, std::string>> refusals;  // by class: count, first message
  const std::vector<int64_t> mbs = {1, 2, 4, 8};
  for (int64_t tp : divisors(gpn)) {
    if (m.heads % tp || m.kv_heads % tp || m.ffn_hidden % tp) continue;
    if (m.moe.experts > 0 && m.moe.expert_ffn_hidden % tp) continue;
    for (int64_t cp : {1, 2, 4, 8}) {
      if (cp > 1 && (m.seq_len < 8192 || m.seq_len % (2 * cp) != 0)) continue;
      if (gpus % (tp * cp) != 0) continue;
      for (int64_t pp : divisors(gpus / (tp * cp))) {
        if (pp > m.layers) continue;
        const int64_t dp = gpus / (tp * cp * pp);
        // A mixture of experts: the experts split over the TP group (expert_tp = tp, EP carved
        // out of DP x CP) or whole on every rank (expert_tp 1, EP carved out of TP x DP x CP).
        std::vector<std::pair<int64_t, int64_t>> expert_layouts = {{1, tp}};  // {ep, expert_tp}
        if (m.moe.experts > 0) {
          expert_layouts.clear();
          for (int64_t etp : tp > 1 ? std::vector<int64_t>{tp, 1} : std::vector<int64_t>{tp})
            for (int64_t ep : divisors(tp / etp * dp * cp))
              if (m.moe.experts % ep == 0) expert_layouts.emplace_back(ep, etp);
        }
        for (const auto& [ep, etp] : expert_layouts)
          for (int64_t mb : mbs) {
            if (s.training.global_batch % (dp * mb) != 0) continue;
            const int64_t micro_batches = s.training.global_batch / (dp * mb);
            std::vector<std::pair<std::string, int64_t>> schedules = {{"1f1b", 1}};
            if (pp > 1 && micro_batches % pp == 0)
              for (int64_t v : {2, 3, 4, 6, 8})
                if (pp * v <= m.layers && m.layers % (pp * v) == 0) schedules.emplace_back("interleaved-1f1b", v);
            for (const auto& [schedule, v] : schedules)
              for (int64_t zero : {0, 1, 2, 3}) {
                if (zero > 0 && dp * cp == 1) continue;
                for (const char* recompute : {"none", "full"})
                  for (bool sp : {false, true}) {
                    if (sp && tp == 1) continue;
                    ++res.enumerated;
                    TrainingLayout l;
                    l.dp = dp;
                    l.tp = tp;
                    l.pp = pp;
                    l.cp = cp;
                    l.ep = ep;
                    l.etp = etp;
                    l.micro_batch = mb;
                    l.micro_batches = micro_batches;
                    l.global_batch = s.training.global_batch;
                    l.schedule = schedule;
                    l.virtual_stages = v;
                    l.zero_stage = zero;
                    l.recompute = recompute;
                    l.sequence_parallel = sp;
                    l.bucket_params = s.parallel.bucket_params;
                    try {
                      const Scenario c = with_layout(s, l);
                      l = check_training_layout(c);
                    } catch (const InputError& e) {
                      ++res.invalid;
                      // Counted by class (the same check at other numbers is one reason); the first
                      // message of the most frequent class is the one shown.
                      auto& [n, example] = refusals[refusal_class(e.detail())];
                      if (n++ == 0) example = e.detail();
                      if (n > res.invalid_reason_count) res.invalid_reason = example, res.invalid_reason_count = n;
                      continue;
                    }
                    if (est.memory_bytes(l) > hbm) {  // before any costing: a probe never runs for it
                      ++res.over_memory;
                      continue;
                    }
                    const LayoutEstimate e = est.estimate(l);
                    ++res.estimated;
                    ranked.emplace_back(l, e);
                  }
              }
          }
      }
    }
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.second.total_s < b.second.total_s; });
  res.estimate_wall_s = seconds_since(t0);

  // Simulate the best K and the baseline.
  std::vector<SearchCandidate> cands;
  for (size_t i = 0; i < ranked.size() && static_cast<int>(cands.size()) < opt.top_k; ++i) {
    SearchCandidate c;
    c.layout = ranked[i].first;
    c.estimate = ranked[i].second;
    cands.push_back(c);
  }
  // The micro-batch group in effect: pp (the default, written or not) unless more is given.
  auto group = [](const TrainingLayout& l) {
    return l.schedule == "interleaved-1f1b" && l.pp > 1 ? std::max(l.microbatch_group, l.pp) : int64_t{0};
  };
  auto same = [&](const TrainingLayout& a, const TrainingLayout& b) {
    return group(a) == group(b) && a.dp == b.dp && a.tp == b.tp && a.pp == b.pp && a.cp == b.cp && a.ep == b.ep &&
           a.expert_tp() == b.expert_tp() && a.micro_batch == b.micro_batch && a.schedule == b.schedule &&
           a.virtual_stages == b.virtual_stages && a.zero_stage == b.zero_stage && a.recompute == b.recompute &&
           a.recompute_num_layers == b.recompute_num_layers && a.sequence_parallel == b.sequence_parallel;
  };
  if (have_baseline) {
    auto found =
        std::find_if(cands.begin(), cands.end(), [&](const SearchCandidate& c) { return same(c.layout, baseline); });
    if (found == cands.end()) {
      SearchCandidate c;
      c.layout = baseline;
      c.estimate = est.estimate(baseline);
      cands.push_back(c);
      found = cands.end() - 1;
    }
    found->baseline = true;
  }
  const auto t1 = std::chrono::steady_clock::now();
  // The scenario's own network model unless --refine names one: its own layout's row is then
  // what `run` gives.
  res.network_model = opt.refine.empty() ? s.network_model : opt.refine;
  // The refinement can take minutes on a large cluster (each candidate a whole simulation):
  // say what comes, and with one thread show each simulation's own progress.
  if (opt.progress && !cands.empty())
    std::fprintf(stderr,
                 "search: %lld layouts enumerated, %lld estimated, in %.3g s; simulating %zu op by op (%s network)\n",
                 static_cast<long long>(res.enumerated), static_cast<long long>(res.estimated),
                 std::chrono::duration<double>(t1 - t0).count(), cands.size(), res.network_model.c_str());
  Progress progress("search: simulating", static_cast<int64_t>(cands.size()), opt.progress);
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::exception_ptr failure;
  auto worker = [&] {
    for (;;) {
      const size_t i = next.fetch_add(1);
      if (i >= cands.size()) return;
      SearchCandidate& c = cands[i];
      try {
        Scenario sc = with_layout(s, c.layout);
        sc.network_model = res.network_model;
        c.settings = candidate_settings(s, c.layout, res.network_model);
        RunOptions ro;
        ro.record_link_usage = false;
        ro.keep_spans = false;
        ro.progress = opt.progress && opt.jobs <= 1;
        const RunOutcome out = run_training(sc, ro);
        for (const auto& [k, v] : out.metrics) {
          if (k == "iteration_time_s") c.simulated_s = v;
          if (k == "mfu") c.mfu = v;
          if (k == "bubble_fraction") c.bubble_fraction = v;
          if (k == "exposed_comm_s") c.exposed_comm_s = v;
          if (k == "peak_memory_per_gpu_bytes") c.peak_memory_bytes = v;
        }
        c.simulated = true;
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!failure) failure = std::current_exception();
      }
      progress.tick(describe_layout(c.layout));
    }
  };
  std::vector<std::thread> threads;
  for (int j = 1; j < std::max(1, opt.jobs); ++j) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  progress.finish();
  if (failure) std::rethrow_exception(failure);
  std::stable_sort(cands.begin(), cands.end(),
                   [](const SearchCandidate& a, const SearchCandidate& b) { return a.simulated_s < b.simulated_s; });
  res.refine_wall_s = seconds_since(t1);
  res.top = std::move(cands);
  if (!res.top.empty()) res.best = 0;
  for (size_t i = 0; i < res.top.size(); ++i)
    if (res.top[i].baseline) res.baseline = static_cast<int>(i);
  return res;
}

namespace {

// A word as a POSIX shell reads it back: as is when it holds nothing the shell treats
// specially, else in single quotes.
std::string shell_word(const std::string& w) {
  if (!w.empty() && w.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._=/:+-,@%") ==
                        std::string::npos)
    return w;
  std::string q = "'";
  for (const char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * x);
  return buf;
}
std::string secs(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g s", x);
  return buf;
}
std::string gib(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", x / (1ull << 30));
  return buf;
}

// Why `a` beats (or matches) `b`, from their simulated breakdowns.
std::string explain(const SearchCandidate& a, const SearchCandidate& b) {
  std::string out;
  const double da = a.simulated_s, db = b.simulated_s;
  out += "  " + describe_layout(a.layout) + " takes " + secs(da) + " against " + secs(db) + " for " +
         describe_layout(b.layout) + " (" + (da <= db ? "-" : "+") + pct(std::fabs(da - db) / db) + ")\n";
  const double bub_a = a.bubble_fraction * da, bub_b = b.bubble_fraction * db;
  out += "    pipeline bubble   " + secs(bub_a) + " vs " + secs(bub_b) + "  (pp " + std::to_string(a.layout.pp) +
         (a.layout.virtual_stages > 1 ? " × v " + std::to_string(a.layout.virtual_stages) : "") + ", " +
         std::to_string(a.layout.micro_batches) + " micro-batches vs pp " + std::to_string(b.layout.pp) +
         (b.layout.virtual_stages > 1 ? " × v " + std::to_string(b.layout.virtual_stages) : "") + ", " +
         std::to_string(b.layout.micro_batches) + ")\n";
  out += "    exposed comm      " + secs(a.exposed_comm_s) + " vs " + secs(b.exposed_comm_s) + "  (tp " +
         std::to_string(a.layout.tp) + ", dp " + std::to_string(a.layout.dp) + " vs tp " + std::to_string(b.layout.tp) +
         ", dp " + std::to_string(b.layout.dp) + ")\n";
  const double busy_a = da - bub_a - a.exposed_comm_s, busy_b = db - bub_b - b.exposed_comm_s;
  out += "    compute and rest  " + secs(busy_a) + " vs " + secs(busy_b) + "  (micro-batch " +
         std::to_string(a.layout.micro_batch) + (a.layout.recompute == "full" ? ", full recompute" : "") + " vs " +
         std::to_string(b.layout.micro_batch) + (b.layout.recompute == "full" ? ", full recompute" : "") + ")\n";
  out += "    memory per GPU    " + gib(a.peak_memory_bytes) + " vs " + gib(b.peak_memory_bytes) + "\n";
  return out;
}

}  // namespace

std::string search_timing(const SearchResult& r) {
  std::string out = "search: " + std::to_string(r.enumerated) + " layouts enumerated and " +
                    std::to_string(r.estimated) + " estimated in " + secs(r.estimate_wall_s);
  if (r.estimate_wall_s > 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " (%.0f layouts/min)", 60.0 * static_cast<double>(r.enumerated) / r.estimate_wall_s);
    out += buf;
  }
  return out + "; " + std::to_string(r.top.size()) + " simulated in " + secs(r.refine_wall_s) + "\n";
}

std::string search_table(const SearchResult& r) {
  // Wall-clock times go to search_timing (stderr): the same scenario gives the same bytes here.
  std::string out = "search " + r.name + ": " + std::to_string(r.enumerated) + " layouts enumerated, " +
                    std::to_string(r.invalid) + " invalid, " + std::to_string(r.over_memory) + " over memory, " +
                    std::to_string(r.estimated) + " estimated; " + std::to_string(r.top.size()) +
                    " simulated op by op\n";
  // The layout column as wide as its longest entry (at least 58), so the columns stay aligned.
  int width = 58;
  for (const SearchCandidate& c : r.top) width = std::max(width, static_cast<int>(describe_layout(c.layout).size()));
  char buf[1024];
  std::snprintf(buf, sizeof buf, "%4s  %-*s %12s %12s %7s %9s %10s\n", "rank", width, "layout", "simulated", "estimate",
                "mfu", "bubble", "memory");
  out += buf;
  for (size_t i = 0; i < r.top.size(); ++i) {
    const SearchCandidate& c = r.top[i];
    std::snprintf(buf, sizeof buf, "%4zu  %-*s %12s %12s %7s %9s %10s%s\n", i + 1, width,
                  describe_layout(c.layout).c_str(), secs(c.simulated_s).c_str(), secs(c.estimate.total_s).c_str(),
                  pct(c.mfu).c_str(), pct(c.bubble_fraction).c_str(), gib(c.peak_memory_bytes).c_str(),
                  c.baseline ? "  <- the scenario's layout" : "");
    out += buf;
  }
  if (r.best < 0)
    return out + "no layout fits" +
           (r.invalid_reason.empty()
                ? std::string()
                : "; the checks' most frequent refusal (" + std::to_string(r.invalid_reason_count) + " of " +
                      std::to_string(r.invalid) + " invalid): " + r.invalid_reason) +
           "\n";
  const SearchCandidate& best = r.top[static_cast<size_t>(r.best)];
  out += "best: " + describe_layout(best.layout) + "\n";
  // The --set pairs that run it: the scenario with these is the winner, op by op.
  {
    const std::string settings = best.settings;
    std::string sets;
    for (size_t at = 0; at < settings.size();) {
      const size_t comma = settings.find(", ", at);
      sets += " --set " + shell_word(settings.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
      at = comma == std::string::npos ? settings.size() : comma + 2;
    }
    out += "run it:" + sets + "\n";
  }
  if (r.baseline >= 0) {
    const SearchCandidate& base = r.top[static_cast<size_t>(r.baseline)];
    if (r.baseline == r.best)
      out += "why: the scenario's own layout is already the fastest found; the runner-up:\n" +
             (r.top.size() > 1 ? explain(best, r.top[1]) : std::string());
    else
      out += "why, against the scenario's layout:\n" + explain(best, base);
  } else {
    out += "the scenario's own layout is not a candidate: " + r.baseline_reason + "\n";
    if (r.top.size() > 1) out += "why, against the runner-up:\n" + explain(best, r.top[1]);
  }
  return out;
}

std::string candidate_json(const SearchCandidate& c) {
  const TrainingLayout& l = c.layout;
  return "{\"dp\": " + std::to_string(l.dp) + ", \"tp\": " + std::to_string(l.tp) +
         ", \"pp\": " + std::to_string(l.pp) + ", \"cp\": " + std::to_string(l.cp) +
         ", \"ep\": " + std::to_string(l.ep) + ", \"expert_tp\": " + std::to_string(l.expert_tp()) +
         ", \"micro_batch\": " + std::to_string(l.micro_batch) + ", \"schedule\": \"" + l.schedule +
         "\", \"virtual_stages\": " + std::to_string(l.virtual_stages) +
         ", \"zero_stage\": " + std::to_string(l.zero_stage) + ", \"recompute\": \"" + l.recompute +
         "\", \"recompute_num_layers\": " +
         (l.recompute_num_layers < 0 ? std::string("\"all\"") : std::to_string(l.recompute_num_layers)) +
         ", \"sequence_parallel\": " + (l.sequence_parallel ? "true" : "false") +
         ", \"iteration_time_s\": " + format_number(c.simulated_s) +
         ", \"estimated_iteration_time_s\": " + format_number(c.estimate.total_s) +
         ", \"mfu\": " + format_number(c.mfu) + ", \"bubble_fraction\": " + format_number(c.bubble_fraction) +
         ", \"exposed_comm_s\": " + format_number(c.exposed_comm_s) +
         ", \"peak_memory_per_gpu_bytes\": " + format_number(c.peak_memory_bytes) +
         ", \"baseline\": " + (c.baseline ? "true" : "false") + ", \"settings\": \"" + json_escape(c.settings) + "\"}";
}

std::string search_json(const SearchResult& r) {
  std::string out = "{\"name\": \"" + json_escape(r.name) + "\", \"enumerated\": " + std::to_string(r.enumerated) +
                    ", \"invalid\": " + std::to_string(r.invalid) + ", \"invalid_reason\": \"" +
                    json_escape(r.invalid_reason) + "\"" + ", \"over_memory\": " + std::to_string(r.over_memory) +
                    ", \"estimated\": " + std::to_string(r.estimated);
  out += ", \"best\": " + (r.best >= 0 ? candidate_json(r.top[static_cast<size_t>(r.best)]) : std::string("null"));
  out += ", \"baseline\": " +
         (r.baseline >= 0 ? candidate_json(r.top[static_cast<size_t>(r.baseline)]) : std::string("null"));
  out += ", \"candidates\": [";
  for (size_t i = 0; i < r.top.size(); ++i) out += (i ? ", " : "") + candidate_json(r.top[i]);
  return out + "]}\n";
}

std::string candidate_settings(const Scenario& s, const TrainingLayout& l, const std::string& network_model) {
  const Scenario c = with_layout(s, l);
  std::string out;
  auto add = [&](const char* key, const std::string& value) {
    out += (out.empty() ? "" : ", ") + (key + ("=" + value));
  };
  auto num = [](int64_t x) { return std::to_string(x); };
  auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
  // The layout, whole.
  add("parallel.dp", num(c.parallel.dp));
  add("parallel.tp", num(c.parallel.tp));
  add("parallel.pp", num(c.parallel.pp));
  add("parallel.cp", num(c.parallel.cp));
  add("parallel.ep", num(c.parallel.ep));
  if (c.model.moe.experts > 0) add("parallel.expert_tp", num(l.expert_tp()));
  add("parallel.micro_batch", num(c.parallel.micro_batch));
  add("parallel.schedule", c.parallel.schedule);
  add("parallel.virtual_stages", num(c.parallel.virtual_stages));
  add("parallel.zero_stage", num(c.parallel.zero_stage));
  add("parallel.sequence_parallel", flag(c.parallel.sequence_parallel));
  add("training.recompute", c.training.recompute);
  if (c.training.recompute == "full" || c.training.recompute_num_layers != s.training.recompute_num_layers)
    add("training.recompute_num_layers",
        c.training.recompute_num_layers < 0 ? std::string("all") : num(c.training.recompute_num_layers));
  // What the layout changed beside it: a key back at its default is null (run's --set takes
  // KEY=null as the key unwritten).
  auto int_key = [&](const char* key, int64_t was, int64_t now, int64_t unset) {
    if (now != was) add(key, now == unset ? std::string("null") : num(now));
  };
  int_key("parallel.microbatch_group", s.parallel.microbatch_group, c.parallel.microbatch_group, 0);
  int_key("parallel.first_stage_layers", s.parallel.first_stage_layers, c.parallel.first_stage_layers, -1);
  int_key("parallel.last_stage_layers", s.parallel.last_stage_layers, c.parallel.last_stage_layers, -1);
  auto name_key = [&](const char* key, const std::string& was, const std::string& now) {
    if (now != was) add(key, s.marks.count(key) && !c.marks.count(key) ? std::string("null") : now);
  };
  name_key("parallel.zero3_param_gather", s.parallel.zero3_param_gather, c.parallel.zero3_param_gather);
  name_key("parallel.zero3_grad_sync", s.parallel.zero3_grad_sync, c.parallel.zero3_grad_sync);
  name_key("parallel.zero3_backward_prefetch", s.parallel.zero3_backward_prefetch, c.parallel.zero3_backward_prefetch);
  name_key("parallel.fsdp_param_dtype", s.parallel.fsdp_param_dtype, c.parallel.fsdp_param_dtype);
  name_key("parallel.fsdp_reduce_dtype", s.parallel.fsdp_reduce_dtype, c.parallel.fsdp_reduce_dtype);
  // Keys the candidate's layout leaves unwritten (with_layout) that the scenario wrote: null.
  for (const char* key : {"parallel.fsdp_version", "parallel.fp8_param_gather", "training.recompute_modules"})
    if (s.marks.count(key) && !c.marks.count(key)) add(key, "null");
  name_key("parallel.grad_reduce_dtype", s.parallel.grad_reduce_dtype, c.parallel.grad_reduce_dtype);
  if (c.parallel.fp8_param_gather != s.parallel.fp8_param_gather && c.marks.count("parallel.fp8_param_gather"))
    add("parallel.fp8_param_gather", flag(c.parallel.fp8_param_gather));
  add("network_model", network_model);
  return out;
}

std::string refusal_class(const std::string& message) {
  std::string out;
  for (size_t i = 0; i < message.size();) {
    if (std::isdigit(static_cast<unsigned char>(message[i]))) {
      out += '#';
      while (i < message.size() &&
             (std::isdigit(static_cast<unsigned char>(message[i])) || message[i] == '.' || message[i] == ','))
        ++i;
    } else {
      out += message[i++];
    }
  }
  return out;
}

}  // namespace clustersim
