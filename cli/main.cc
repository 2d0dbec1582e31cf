// The clustersim command line. Only this file decides exit codes:
//   0 success, 1 bad input (scenario or flag values), 2 usage, 3 failure while running
//   or writing results.
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "cli/accuracy.h"
#include "cli/args.h"
#include "cli/calibrate_args.h"
#include "cli/commands.h"
#include "cli/validate.h"
#include "reports/output_file.h"
#include "scenarios/error.h"
#ifdef CLUSTERSIM_HAVE_REAL
#include "cli/real_commands.h"
#endif

namespace clustersim {
namespace {

constexpr const char* kUsage =
    "usage: clustersim <command> [options]\n"
    "\n"
    "commands:\n"
    "  run S.yaml [--set key=value]... [--samples N [--jobs J]] [--json]\n"
    "                                                simulate a training or serving scenario (--samples: N\n"
    "                                                seeded draws of its variability:, p5 / p50 / p95)\n"
    "  collective --op OP --gpus N (--cluster PRESET [--nodes K] | --topology-file T.yaml) [--algo A] [--proto P]\n"
    "             [--network-model auto|analytic|flow] [--concurrent K] [--fabric F] [--oversubscription X]\n"
    "             [--nics-per-leaf N] [--profile P.yaml] [--min SIZE] [--max SIZE] [--json]\n"
    "                                                collective size sweep, nccl-tests style\n"
    "  plan S.yaml [--set key=value]... [--out FILE] write the scenario's Plan as JSON (stdout by default)\n"
    "  sweep S.yaml [--jobs N] [--set key=value]... [--out R.sqlite] [--rank-by METRIC] [--mpi] [--json]\n"
    "                                                run every point of the scenario's sweep: block and rank them;\n"
    "                                                results in R.sqlite (default output.sqlite), resumable;\n"
    "                                                --mpi spreads the points over mpirun's ranks\n"
    "  export-chakra S.yaml --out DIR [--set key=value]...\n"
    "                                                the scenario's plan as Chakra execution traces, one per\n"
    "                                                rank (DIR/<name>.<rank>.et), and DIR/comm_group.json\n"
    "  report RUN.sqlite --html OUT.html [--run ID] [--max-spans N] [--ranks R,..] [--stages S,..]\n"
    "         [--streams compute,tp,..]\n"
    "                                                a self-contained HTML report of one run (default: the last)\n"
    "  search S.yaml [--top K] [--jobs N] [--refine flow|analytic] [--set key=value]... [--out R.sqlite] [--json]\n"
    "                                                the fastest valid training layout for the model, cluster and\n"
    "                                                global batch: estimate every layout, simulate the best K\n"
    "  real S.yaml [--set key=value]... [--iterations N] [--warmup W] [--timing ops|stream] [--mpi] [--json]\n"
    "                                                execute the scenario's plan on GPUs (CUDA, cuBLAS, NCCL): one\n"
    "                                                thread per local GPU, or one process per GPU under mpirun --mpi\n"
    "                                                (the same: clustersim-real S.yaml ...); --timing stream: no\n"
    "                                                event between ops, the iteration alone (default ops: each op)\n"
    "  calibrate --suite gemm|attention|memory|launch|collectives|p2p|overlap|all --out P.yaml [--raw M.sqlite]\n"
    "            [--attention-from SDPA.yaml]           (take attention rows another stack measured)\n"
    "            [--attention-backend cudnn|own|auto]   (which kernels to time; default auto: cuDNN's\n"
    "                                                fused attention where it loads, CLUSTERSIM_ATTENTION)\n"
    "            [--passes N]\n"
    "                                                measure this GPU's kernels (and, on 2+ GPUs, NCCL's\n"
    "                                                collectives; overlap: kernels beside a waiting NCCL\n"
    "                                                kernel, not part of all) into a calibration profile\n"
    "  validate S.yaml --profile P.yaml [--iterations N] [--json] [--real-from DB.sqlite] [--against pytorch]\n"
    "           [--timing ops|stream]\n"
    "                                                run real and simulated, report per-op and end-to-end error\n"
    "                                                (--real-from: against the real run a validate recorded;\n"
    "                                                --against pytorch: the plain-PyTorch step on the local GPU;\n"
    "                                                --timing stream: the iteration alone, no event between ops,\n"
    "                                                kernels simulated from a full queue)\n"
    "  profile-check P.yaml [--gpu PRESET]           held-out error of a profile's GEMM interpolation, and the\n"
    "                                                built-in model against its measured GEMM and attention rows\n"
    "  accuracy DIR [--json] [--jobs N] [--set key=value]... [--only PATTERN]... [--kind training|serving]\n"
    "                                                every scenario in DIR with a reference: block, predicted\n"
    "                                                against the published value; error per case, MAPE, worst;\n"
    "                                                --set applies to every case, --only keeps the files whose\n"
    "                                                name matches a shell pattern, --kind the cases of one\n"
    "                                                kind (a what-if over the set)\n"
    "  keys                                          list every scenario key (type, default, meaning)\n"
    "  help, --help                                  this text\n"
    "  --version                                     the version\n"
    "\n"
    "run options:\n"
    "  --set key=value       override a scenario key (repeatable), e.g. --set parallel.tp=4\n"
    "  --json                print one JSON object instead of the table\n"
    "  --simulate-all-ranks  simulate every rank instead of one per symmetry class\n"
    "  --allow-large         run past the work budgets (2^20 GPUs or collective ranks, 10^7 requests, 65,536\n"
    "                        micro-batches, 100,000 sweep points); also for plan, sweep, search, collective\n";

constexpr const char* kCommands[] = {"run",    "collective", "plan",      "export-chakra", "sweep",         "search",
                                     "report", "real",       "calibrate", "validate",      "profile-check", "accuracy",
                                     "keys"};

// A failed command's exit status, its message said: a usage error 2 (with the usage), a
// bad input 1 (marked where it is), anything else 3 (unsaid where `say_other` is false).
int failure_status(const std::exception_ptr& failure, bool say_other = true) {
  try {
    std::rethrow_exception(failure);
  } catch (const UsageError& e) {
    std::cerr << "clustersim: " << e.what() << "\n\n" << kUsage;
    return 2;
  } catch (const InputError& e) {
    std::cerr << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    if (say_other) std::cerr << "clustersim: error: " << e.what() << "\n";
    return 3;
  }
}

// Runs one command; its exit code.
int dispatch(const std::string& cmd, const std::vector<std::string>& args) {
  // `clustersim CMD --help` (or -h) asks for the usage, not for the command.
  if (std::find(std::begin(kCommands), std::end(kCommands), cmd) != std::end(kCommands) &&
      std::any_of(args.begin(), args.end(), [](const std::string& a) { return a == "--help" || a == "-h"; })) {
    std::cout << kUsage;
    return 0;
  }
  try {
    if (cmd == "run") return cmd_run(args);
    if (cmd == "collective") return cmd_collective(args);
    if (cmd == "plan") return cmd_plan(args);
    if (cmd == "export-chakra") return cmd_export_chakra(args);
    if (cmd == "sweep") return cmd_sweep(args);
    if (cmd == "search") return cmd_search(args);
    if (cmd == "report") return cmd_report(args);
    if (cmd == "real") return cmd_real(args);
    if (cmd == "validate") {
      RealHooks hooks;
#ifdef CLUSTERSIM_HAVE_REAL
      hooks = real_hooks();
#endif
      try {
        return cmd_validate(args, hooks);
      } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());
      }
    }
    if (cmd == "calibrate") {
      try {
#ifdef CLUSTERSIM_HAVE_REAL
        return cmd_calibrate(args);
#else
        parse_calibrate_args(args);  // checked all the same
#endif
      } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());
      }
      throw std::runtime_error(
          cmd + " needs the real backend: CUDA, cuBLASLt and NCCL were not found when this build was configured");
    }
    // Commands that take nothing say so rather than ignore what they were given.
    if ((cmd == "keys" || cmd == "--version") && !args.empty())
      throw UsageError(cmd + " takes no arguments, got '" + args.front() + "'");
    if (cmd == "keys") return cmd_keys();
    if (cmd == "accuracy") {
      try {
        return cmd_accuracy(args);
      } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());
      }
    }
    if (cmd == "profile-check") return cmd_profile_check(args);
    if (cmd == "help" || cmd == "--help" || cmd == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (cmd == "--version") {
      std::cout << "clustersim 0.1.0\n";
      return 0;
    }
    throw UsageError("unknown command '" + cmd + "'");
  } catch (...) {
    return failure_status(std::current_exception());
  }
}

// A command's output that did not reach its destination (a full disk, /dev/full, a
// closed pipe) is a failure: exit 3, not 0.
int check_stdout(int rc) {
  errno = 0;
  std::cout.flush();
  const bool ok = std::cout.good() && std::fflush(stdout) == 0 && !std::ferror(stdout);
  if (ok) return rc;
  std::cerr << "clustersim: error: cannot write standard output" << (errno ? std::string(": ") + std::strerror(errno) : "")
            << "\n";
  return 3;
}

}  // namespace
}  // namespace clustersim

using namespace clustersim;

#ifdef CLUSTERSIM_GPU_BINARY
// The commands that drive GPUs run in the GPU binary built beside this one: loading
// cuBLASLt and NCCL costs ~200 MB and ~50 ms at every start, which a simulation should
// not pay. Does not return: the command runs there, or fails here naming the binary.
bool needs_gpu_binary(const std::string& cmd, const std::vector<std::string>& args) {
  // --help is answered here: the usage needs no GPU, nor the binary that drives them.
  if (std::find(args.begin(), args.end(), "--help") != args.end() ||
      std::find(args.begin(), args.end(), "-h") != args.end())
    return false;
  if (cmd == "real" || cmd == "calibrate") return true;
  // validate --real-from compares with a recording: no GPU.
  return cmd == "validate" && std::find(args.begin(), args.end(), "--real-from") == args.end() &&
         std::find(args.begin(), args.end(), "--against") == args.end();
}

// Returns (the reason, for the caller to report) only when the GPU binary cannot be run.
std::string hand_to_gpu_binary(const std::string& cmd, char** argv) {
  std::string self(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", self.data(), self.size() - 1);
  std::string gpu = CLUSTERSIM_GPU_BINARY;
  if (n > 0) {
    self.resize(static_cast<size_t>(n));
    gpu = self.substr(0, self.rfind('/') + 1) + gpu;
    argv[0] = const_cast<char*>(gpu.c_str());
    ::execv(gpu.c_str(), argv);
  }
  return cmd + " runs in " + gpu + ", built beside clustersim, which cannot be run" +
         (n > 0 ? std::string(": ") + std::strerror(errno) : std::string());
}

// The GPU binary cannot be run: the command's arguments are still checked here, as that
// binary checks them (a usage error exits 2, a bad scenario or value 1), and good ones fail
// on the missing binary (3).
int without_gpu_binary(const std::string& cmd, const std::vector<std::string>& args, const std::string& why) {
  try {
    if (cmd == "real") cmd_real(args);
    if (cmd == "validate") cmd_validate(args, RealHooks{});
    if (cmd == "calibrate") parse_calibrate_args(args);
  } catch (const std::invalid_argument& e) {
    return failure_status(std::make_exception_ptr(UsageError(e.what())));
  } catch (...) {
    if (const int rc = failure_status(std::current_exception(), false); rc != 3) return rc;
  }
  std::cerr << "clustersim: error: " << why << "\n";
  return 3;
}
#endif

int main(int argc, char** argv) {
  // A run builds and frees vectors of millions of records (spans, link usage, plans).
  // glibc maps blocks above 32 MiB afresh and hands freed ones back to the kernel, so
  // every regrowth faults its pages in again: a quarter of a 1,024-GPU run's time with
  // its SQLite. Keep what was once mapped (the process ends with the command anyway).
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
  // An interrupt removes the temporaries of outputs being written (reports/output_file.h).
  install_signal_cleanup();
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << kUsage;
    return 2;
  }
#ifdef CLUSTERSIM_HAVE_REAL
  // Called as clustersim-real with a scenario rather than a command: `clustersim real`.
  {
    const std::string self = argv[0];
    const std::string name = self.substr(self.rfind('/') + 1);
    static const char* const kCommands[] = {"run",       "collective",    "plan",     "export-chakra", "sweep",
                                            "search",    "report",        "real",     "validate",      "calibrate",
                                            "keys",      "profile-check", "accuracy", "help",          "--help",
                                            "-h",        "--version"};
    if (name == "clustersim-real" &&
        std::find(std::begin(kCommands), std::end(kCommands), args.front()) == std::end(kCommands))
      args.insert(args.begin(), "real");
  }
#endif
  const std::string cmd = args.front();
  args.erase(args.begin());
#ifdef CLUSTERSIM_GPU_BINARY
  if (needs_gpu_binary(cmd, args)) return without_gpu_binary(cmd, args, hand_to_gpu_binary(cmd, argv));
#endif
  return check_stdout(dispatch(cmd, args));
}
