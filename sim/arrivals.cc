// Arrivals and lengths of a serving run's requests (sim/arrivals.h).
#include "sim/arrivals.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "plan/rng.h"
#include "scenarios/error.h"
#include "scenarios/readers.h"
#include "sim/run.h"

namespace clustersim {
namespace {

class LengthSampler {
 public:
  explicit LengthSampler(const LengthDist& d) : d_(d) {
    if (d.dist == "zipf") {
      double sum = 0;
      for (int64_t k = d.min; k <= d.max; ++k) cdf_.push_back(sum += std::pow(static_cast<double>(k), -d.alpha));
      for (double& c : cdf_) c /= sum;
    }
  }
  int64_t draw(Rng& r) const {
    if (d_.dist == "fixed") return d_.value;
    if (d_.dist == "uniform")
      return d_.min + static_cast<int64_t>(r.uniform() * static_cast<double>(d_.max - d_.min + 1));
    if (d_.dist == "lognormal") {
      const double mu = std::log(d_.mean) - d_.sigma * d_.sigma / 2;  // so the mean is `mean`
      // Clipped as a double: a draw past int64's range (a mean of 1e20) is the longest length.
      const double lo = static_cast<double>(std::max<int64_t>(1, d_.min)), hi = static_cast<double>(d_.max);
      const double x = std::exp(mu + d_.sigma * r.normal());
      return std::llround(std::isnan(x) ? lo : std::clamp(x, lo, std::max(lo, hi)));
    }
    const double u = r.uniform();
    return d_.min + static_cast<int64_t>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
  }

 private:
  LengthDist d_;
  std::vector<double> cdf_;
};

std::vector<Arrival> load_trace(const Scenario& s) {
  const std::string& p = s.serving.trace;  // resolved as the key was read (as_path)
  std::error_code ec;
  if (std::filesystem::exists(p, ec) && !std::filesystem::is_regular_file(p, ec))
    throw InputError(s.mark("inference.arrivals.trace"),
                     "trace '" + p + "' is not a regular file, expected a CSV file");
  std::ifstream in(p);
  if (!in) throw InputError(s.mark("inference.arrivals.trace"), "cannot open trace '" + p + "', expected a CSV file");
  constexpr const char* kRow = "expected arrival_s, prompt_tokens, output_tokens[, prefix_group]";
  const int64_t seq_len = s.model.seq_len, prefix = s.serving.prefix_groups > 0 ? s.serving.prefix_tokens : 0;
  std::vector<Arrival> out;
  std::string line;
  int lineno = 0;
  bool first = true;  // the first line that is neither blank nor a comment: a header if it starts with a letter
  // inference.requests, where the scenario sets it, serves the trace's first rows.
  const bool capped = s.marks.count("inference.requests") > 0;
  while ((!capped || static_cast<int64_t>(out.size()) < s.serving.requests) && std::getline(in, line)) {
    ++lineno;
    if (lineno == 1 && line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);  // a UTF-8 byte order mark
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos || line[line.find_first_not_of(" \t")] == '#') continue;
    // A header names its columns: its first field is a word, not a number strtod reads (nan, inf).
    std::string lead = line.substr(line.find_first_not_of(" \t"), 8);
    std::transform(lead.begin(), lead.end(), lead.begin(), [](unsigned char c) { return std::tolower(c); });
    const bool header = first && std::isalpha(static_cast<unsigned char>(lead[0])) && !lead.starts_with("nan") &&
                        !lead.starts_with("inf");
    first = false;
    if (header) continue;
    // The fields between commas, each with its column, spaces around it dropped.
    std::vector<std::pair<std::string, int>> f;
    for (size_t at = 0;;) {
      const size_t comma = std::min(line.find(',', at), line.size());
      const size_t b = std::min(line.find_first_not_of(" \t", at), comma);
      size_t e = comma;
      while (e > b && (line[e - 1] == ' ' || line[e - 1] == '\t')) --e;
      f.emplace_back(line.substr(b, e - b), static_cast<int>(b) + 1);
      if (comma == line.size()) break;
      at = comma + 1;
    }
    auto bad = [&](size_t i, const std::string& what) {
      return InputError(SourceMark{p, lineno, i < f.size() ? f[i].second : 1}, what);
    };
    if (f.size() < 3) throw bad(0, "malformed trace row: " + std::to_string(f.size()) + " field(s), " + kRow);
    if (f.size() > 4) throw bad(4, "trace row has a fifth column '" + f[4].first + "', " + kRow);
    Arrival a{};
    // Times are doubles in seconds: past ~1e9 s (31 years) they no longer resolve a microsecond.
    if (!parse_decimal(f[0].first, a.t) || a.t < 0 || a.t > 1e9)
      throw bad(0, "bad arrival_s '" + f[0].first + "', expected seconds from 0 to 1e9");
    if (!out.empty() && a.t < out.back().t)
      throw bad(0, "arrival_s " + f[0].first + " is before the row above's, expected rows in arrival order");
    // Token counts as the scenario's own length keys allow them (1 .. 16777216).
    for (const auto& [i, v] : {std::pair<size_t, int64_t*>{1, &a.prompt}, {2, &a.output}})
      if (!parse_integer(f[i].first, *v) || *v < 1 || *v > (int64_t{1} << 24))
        throw bad(i, std::string("bad ") + (i == 1 ? "prompt_tokens" : "output_tokens") + " '" + f[i].first +
                         "', expected a whole number of tokens from 1 to 16777216");
    if (a.prompt + a.output > seq_len)
      throw bad(1, "a prompt of " + std::to_string(a.prompt) + " and an output of " + std::to_string(a.output) +
                       " tokens run past model.seq_len = " + std::to_string(seq_len) +
                       " (the longest context the model serves), expected shorter or a longer model.seq_len");
    if (f.size() == 4) {
      if (!parse_integer(f[3].first, a.group) || a.group < -1 || a.group >= s.serving.prefix_groups)
        throw bad(3, "bad prefix_group '" + f[3].first + "', expected -1 (none)" +
                         (s.serving.prefix_groups > 0 ? " or 0 .. shared_prefix.groups - 1"
                                                      : ": the scenario has no shared_prefix groups"));
      if (a.group >= 0 && a.prompt < prefix)
        throw bad(1, "a prompt of " + std::to_string(a.prompt) + " tokens opens with a shared prefix of " +
                         std::to_string(prefix) +
                         " (inference.shared_prefix.tokens), expected a prompt at least "
                         "as long as its prefix");
    }
    out.push_back(a);
  }
  if (out.empty()) throw InputError(s.mark("inference.arrivals.trace"), "trace '" + p + "' has no requests");
  if (capped && static_cast<int64_t>(out.size()) < s.serving.requests)
    throw InputError(s.mark("inference.requests"), "inference.requests = " + std::to_string(s.serving.requests) +
                                                       " asks for more requests than trace '" + p + "' has rows (" +
                                                       std::to_string(out.size()) + "), expected at most that many");
  return out;
}

}  // namespace

std::vector<Arrival> make_arrivals(const Scenario& s) {
  const InferenceConfig& c = s.serving;
  if (!c.trace.empty()) return load_trace(s);
  Rng gaps(c.arrival_seed), lengths(c.arrival_seed ^ 0x5DEECE66Dull), groups(c.arrival_seed ^ 0xF1E2D3C4B5A6ull);
  const LengthSampler prompt(c.prompt), output(c.output);
  std::vector<Arrival> out(static_cast<size_t>(c.requests));
  double t = 0;
  const double shape = c.cv > 0 ? 1 / (c.cv * c.cv) : 1;
  for (Arrival& a : out) {
    a.t = t;
    a.prompt = prompt.draw(lengths);
    a.output = output.draw(lengths);
    if (c.prefix_groups > 0)
      a.group =
          std::min(c.prefix_groups - 1, static_cast<int64_t>(groups.uniform() * static_cast<double>(c.prefix_groups)));
    if (c.arrival_process == "fixed")
      t += 1 / c.rate_per_s;
    else if (c.arrival_process == "gamma")
      t += gaps.gamma(shape) / (shape * c.rate_per_s);
    else
      t += -std::log(gaps.uniform()) / c.rate_per_s;
  }
  return out;
}

}  // namespace clustersim
