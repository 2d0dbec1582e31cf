// `clustersim report`: one self-contained HTML file for a run.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "reports/html_report.h"
#include "reports/output_file.h"

namespace clustersim {

namespace {
// The items of "a,b,c", empty ones included ("a,,b" and "" have an empty item).
std::vector<std::string> comma_list(const std::string& v) {
  std::vector<std::string> items;
  for (size_t p = 0; p <= v.size();) {
    size_t q = v.find(',', p);
    if (q == std::string::npos) q = v.size();
    items.push_back(v.substr(p, q - p));
    p = q + 1;
  }
  return items;
}
}  // namespace

int cmd_report(const std::vector<std::string>& args) {
  refuse_repeated(args, {"--html", "--run", "--max-spans"});
  std::string db, html;
  ReportOptions opt;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--html") {
      html = need_value(args, i);
    } else if (a == "--run") {
      opt.run_id = need_count(args, i, a, INT64_MAX);
    } else if (a == "--max-spans") {
      opt.max_spans = need_count(args, i, a, INT64_MAX);
      opt.max_spans_given = true;
    } else if (a == "--ranks" || a == "--stages") {
      const std::string v = need_value(args, i);
      std::vector<int64_t>& out = a == "--ranks" ? opt.ranks : opt.stages;
      for (const std::string& item : comma_list(v)) {
        char* end = nullptr;
        errno = 0;
        const long long n = std::strtoll(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || n < 0 || errno == ERANGE)
          throw InputError(SourceMark{a, 0, 0},
                           "expected a comma-separated list of non-negative integers, got '" + v + "'");
        out.push_back(n);
      }
    } else if (a == "--streams") {
      const std::string v = need_value(args, i);
      for (const std::string& item : comma_list(v)) {
        if (item.empty())
          throw InputError(SourceMark{a, 0, 0}, "expected a comma-separated list of stream names, got '" + v + "'");
        opt.streams.push_back(item);
      }
    } else if (!a.empty() && a[0] == '-') {
      throw UsageError("unknown option '" + a + "' for report");
    } else if (db.empty()) {
      db = a;
    } else {
      throw UsageError("report takes one database, got '" + db + "' and '" + a + "'");
    }
  }
  if (db.empty()) throw UsageError("report needs a database (RUN.sqlite)");
  if (html.empty()) throw UsageError("report needs --html OUT.html");
  check_input_file(db, "a clustersim SQLite database");
  check_output(SourceMark{"--html", 0, 0}, "--html", html, {db});
  std::string page;
  try {
    page = render_html_report(db, opt);
  } catch (const ReportInputError& e) {
    throw InputError(SourceMark{e.no_such_run ? "--run" : db, 0, 0}, e.what());
  } catch (const std::invalid_argument& e) {
    throw InputError(SourceMark{!opt.ranks.empty()     ? "--ranks"
                                : !opt.stages.empty()  ? "--stages"
                                : !opt.streams.empty() ? "--streams"
                                                       : "--max-spans",
                                0, 0},
                     e.what());
  }
  make_parent_dirs(html);
  write_file_atomically(html, page);
  std::cerr << "wrote " << html << "\n";
  return 0;
}

}  // namespace clustersim
