#include "cli/calibrate_args.h"

#include <cstdlib>
#include <stdexcept>

#include "cli/args.h"
#include "cli/output.h"
#include "cli/validate.h"
#include "scenarios/scenario.h"

namespace clustersim {

CalibrateArgs parse_calibrate_args(const std::vector<std::string>& args) {
  refuse_repeated(args, {"--out", "--suite", "--raw", "--attention-from", "--attention-backend", "--passes"});
  CalibrateArgs a;
  std::string attention_from;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--out")
      a.out = value_of(args, i);
    else if (args[i] == "--suite")
      a.suite = value_of(args, i);
    else if (args[i] == "--raw")
      a.raw = value_of(args, i);
    else if (args[i] == "--attention-from")
      attention_from = value_of(args, i);
    else if (args[i] == "--attention-backend") {
      a.attention_backend = value_of(args, i);
      if (a.attention_backend != "cudnn" && a.attention_backend != "own" && a.attention_backend != "auto")
        throw InputError(SourceMark{"--attention-backend", 0, 0},
                         "'" + a.attention_backend + "' is not an attention backend, expected cudnn, own or auto");
    } else if (args[i] == "--passes") {
      const std::string v = value_of(args, i);
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 1 || n > 100)
        throw InputError(SourceMark{"--passes", 0, 0}, "'" + v + "' is not a pass count, expected 1 to 100");
      a.passes = static_cast<int>(n);
    } else
      throw std::invalid_argument("unknown option '" + args[i] + "' for calibrate");
  }
  if (a.out.empty()) throw std::invalid_argument("calibrate needs --out P.yaml");
  if (a.raw.empty()) a.raw = a.out + ".raw.sqlite";
  check_output(SourceMark{"--out", 0, 0}, "--out", a.out, {a.raw});
  check_output(SourceMark{"--raw", 0, 0}, "--raw", a.raw, {}, true);
  if (a.out == a.raw)
    throw InputError(SourceMark{"--raw", 0, 0}, "--raw names the profile --out writes, expected another file");
  size_t start = 0;
  for (;;) {
    const size_t comma = a.suite.find(',', start);
    const std::string s = a.suite.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (s == "all")
      a.all = a.gemm = a.attention = a.memory = a.launch = true;
    else if (s == "gemm")
      a.gemm = true;
    else if (s == "attention")
      a.attention = true;
    else if (s == "memory")
      a.memory = true;
    else if (s == "launch")
      a.launch = true;
    else if (s == "collectives")
      a.collectives = true;
    else if (s == "p2p")
      a.p2p = true;
    else if (s == "overlap")
      a.overlap = true;
    else
      throw InputError(SourceMark{"--suite", 0, 0}, "unknown suite '" + s +
                                                        "', expected gemm, attention, memory, launch, collectives, "
                                                        "p2p, overlap or all");
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  // --attention-from: the attention table another stack's kernels produced (the profile
  // fragment `calibrate/pytorch_reference.py --attention-table` writes: PyTorch SDPA), in
  // place of this backend's own kernel, with the backend it names.
  if (!attention_from.empty()) {
    if (!a.attention_backend.empty())
      throw InputError(SourceMark{"--attention-backend", 0, 0},
                       "--attention-backend picks the kernels calibrate times, and --attention-from times none");
    check_output(SourceMark{"--out", 0, 0}, "--out", a.out, {a.raw, attention_from});
    const CalibrationProfile from = load_profile(attention_from, SourceMark{"--attention-from", 0, 0});
    if (!from.compute.measured || from.compute.measured->attention.empty())
      throw InputError(SourceMark{attention_from, 1, 1},
                       "holds no compute.attention_table, expected the rows "
                       "`pytorch_reference.py --attention-table` writes");
    a.borrowed = from.compute.measured->attention;
    a.borrowed_backend = from.attention_backend.empty() ? "from " + attention_from : from.attention_backend;
    a.attention = false;
  }
  return a;
}

}  // namespace clustersim
