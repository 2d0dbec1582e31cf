// Hostile outputs: a command's output never replaces anything but the regular file it
// names (not a device, a FIFO, a directory, the link to one, nor any of the command's
// inputs), and output that cannot be written is exit 3, never 0. Every device here is
// reached through a private symbolic link or FIFO in the test's own directory; no system
// path is ever written.
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/cli_harness.h"

namespace {

class OutputSafetyTest : public CliTest {
 protected:
  std::string fifo(const std::string& rel) {
    const fs::path p = dir_ / rel;
    fs::create_directories(p.parent_path());
    EXPECT_EQ(::mkfifo(p.c_str(), 0600), 0);
    return p.string();
  }
  // A link in the test directory to /dev/null: the device is what the link names.
  std::string link_to_dev_null(const std::string& rel) {
    const fs::path p = dir_ / rel;
    fs::create_symlink("/dev/null", p);
    return p.string();
  }
  static bool is_fifo(const std::string& p) {
    struct stat st{};
    return ::lstat(p.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
  }
  std::string example() {
    return write("s.yaml", "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
                           "parallel: {tp: 8}\n");
  }
  // Exit 1 naming `phrase`, nothing on stdout.
  void expect_refused(const CliResult& r, const std::string& phrase) {
    EXPECT_EQ(r.code, 1) << r;
    EXPECT_NE(r.err.find(phrase), std::string::npos) << r << "\nexpected phrase: " << phrase;
    EXPECT_TRUE(r.out.empty()) << r;
  }
  // Runs `args` with stdout on /dev/full (writes fail with ENOSPC; nothing is changed).
  CliResult to_dev_full(const std::string& args) {
    const fs::path err = dir_ / "capture" / "stderr";
    const std::string cmd = "cd " + quote(dir_.string()) + " && " + quote(CLUSTERSIM_BINARY) + " " + args +
                            " >/dev/full 2>" + quote(err.string());
    const int status = std::system(cmd.c_str());
    CliResult r;
    r.code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.err = read_file(err);
    return r;
  }
};

// ---- class 1: outputs renamed over what they name ------------------------------------------

TEST_F(OutputSafetyTest, TraceThroughALinkToADeviceIsRefused) {
  const std::string s = example(), dev = link_to_dev_null("null");
  expect_refused(cli("run " + quote(s) + " --set output.trace=" + quote(dev)), "a character device");
  EXPECT_TRUE(fs::is_symlink(dev));
  EXPECT_EQ(fs::read_symlink(dev), "/dev/null");
}

TEST_F(OutputSafetyTest, SqliteThroughALinkToADeviceIsRefused) {
  const std::string s = example(), dev = link_to_dev_null("null");
  expect_refused(cli("run " + quote(s) + " --set output.sqlite=" + quote(dev)), "a character device");
  EXPECT_EQ(fs::read_symlink(dev), "/dev/null");
}

TEST_F(OutputSafetyTest, TraceOnAFifoIsRefusedAndTheFifoKept) {
  const std::string s = example(), f = fifo("pipe");
  expect_refused(cli("run " + quote(s) + " --set output.trace=" + quote(f)), "a FIFO");
  EXPECT_TRUE(is_fifo(f));
}

TEST_F(OutputSafetyTest, SqliteOnAFifoIsRefused) {
  const std::string s = example(), f = fifo("pipe");
  expect_refused(cli("run " + quote(s) + " --set output.sqlite=" + quote(f)), "a FIFO");
  EXPECT_TRUE(is_fifo(f));
}

TEST_F(OutputSafetyTest, TraceOverTheScenarioIsRefused) {
  const std::string s = example();
  const std::string before = read_file(s);
  expect_refused(cli("run " + quote(s) + " --set output.trace=" + quote(s)), "is an input of this command");
  EXPECT_EQ(read_file(s), before);
}

TEST_F(OutputSafetyTest, SqliteOverAnIncludedFileIsRefused) {
  const std::string common = write("common.yaml", "cluster: {preset: dgx-h100, nodes: 1}\n");
  const std::string s = write("s.yaml", "include: [common.yaml]\nmodel: {preset: gpt3-1.3b, layers: 2}\n");
  const std::string before = read_file(common);
  expect_refused(cli("run " + quote(s) + " --set output.sqlite=" + quote(common)), "is an input of this command");
  EXPECT_EQ(read_file(common), before);
}

TEST_F(OutputSafetyTest, TraceOverTheScenarioThroughAnotherNameIsRefused) {
  const std::string s = example();
  const std::string other = (dir_ / "alias.yaml").string();
  fs::create_hard_link(s, other);
  const std::string before = read_file(s);
  expect_refused(cli("run " + quote(s) + " --set output.trace=" + quote(other)), "is an input of this command");
  EXPECT_EQ(read_file(s), before);
}

TEST_F(OutputSafetyTest, APathThroughAFolderNotYetMadeIsCheckedAsItWillResolve) {
  // "new/../s.yaml" names the scenario once the run has made "new": refused before any
  // work, nothing made, nothing written. The same for a directory reached that way: the
  // database beside it is not written either.
  const std::string s = example();
  const std::string before = read_file(s);
  const std::string via = (dir_ / "new" / ".." / fs::path(s).filename()).string();
  expect_refused(cli("run " + quote(s) + " --set output.trace=" + quote(via)), "is an input of this command");
  EXPECT_EQ(read_file(s), before);
  EXPECT_FALSE(fs::exists(dir_ / "new"));
  fs::create_directory(dir_ / "d");
  const std::string db = (dir_ / "r.sqlite").string();
  expect_refused(cli("run " + quote(s) + " --set output.sqlite=" + quote(db) +
                     " --set output.trace=" + quote((dir_ / "new2" / ".." / "d").string())),
                 "is a directory");
  EXPECT_FALSE(fs::exists(db));
  EXPECT_FALSE(fs::exists(dir_ / "new2"));
  // After the folder to be made, a link is followed as the file system will follow it:
  // "new3/../link/../s.yaml" is the scenario when link points at a folder beside it.
  fs::create_directories(dir_ / "sub" / "deeper");
  fs::create_directory_symlink(dir_ / "sub" / "deeper", dir_ / "link");
  const std::string inner = write("sub/s.yaml", read_file(s));
  const std::string through = (dir_ / "new3" / ".." / "link" / ".." / "s.yaml").string();
  expect_refused(cli("run " + quote(inner) + " --set output.trace=" + quote(through)), "is an input of this command");
  EXPECT_EQ(read_file(inner), read_file(s));
  EXPECT_FALSE(fs::exists(dir_ / "new3"));
}

TEST_F(OutputSafetyTest, PlanAndReportMakeTheFoldersTheirOutputNeeds) {
  // As run's output.* do: the folders above the file are made when it is written, and
  // not when the command is refused first.
  const std::string s = example();
  EXPECT_EQ(cli("plan " + quote(s) + " --out " + quote((dir_ / "a" / "b" / "p.json").string())).code, 0);
  EXPECT_TRUE(fs::is_regular_file(dir_ / "a" / "b" / "p.json"));
  const std::string db = (dir_ / "r.sqlite").string();
  ASSERT_EQ(cli("run " + quote(s) + " --set output.sqlite=" + quote(db)).code, 0);
  EXPECT_EQ(cli("report " + quote(db) + " --html " + quote((dir_ / "c" / "r.html").string())).code, 0);
  EXPECT_TRUE(fs::is_regular_file(dir_ / "c" / "r.html"));
  write("text.sqlite", "not a database");
  const CliResult bad =
      cli("report " + quote((dir_ / "text.sqlite").string()) + " --html " + quote((dir_ / "d" / "r.html").string()));
  EXPECT_EQ(bad.code, 1) << bad;
  EXPECT_FALSE(fs::exists(dir_ / "d"));
}

TEST_F(OutputSafetyTest, TraceOverTheCalibrationProfileIsRefused) {
  const std::string profile = std::string(CLUSTERSIM_SOURCE_DIR) + "/calibrate/profiles/h200.yaml";
  const fs::path copy = dir_ / "p.yaml";
  fs::copy_file(profile, copy);
  const std::string s = write("s.yaml", "cluster: {preset: dgx-h200, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
                                        "calibration: p.yaml\n");
  const std::string before = read_file(copy);
  expect_refused(cli("run " + quote(s) + " --set output.trace=" + quote(copy.string())), "is an input of this command");
  EXPECT_EQ(read_file(copy), before);
}

TEST_F(OutputSafetyTest, PlanOutOverTheScenarioIsRefused) {
  const std::string s = example();
  const std::string before = read_file(s);
  expect_refused(cli("plan " + quote(s) + " --out " + quote(s)), "is an input of this command");
  EXPECT_EQ(read_file(s), before);
}

TEST_F(OutputSafetyTest, PlanOutOnAFifoOrADeviceIsRefused) {
  const std::string s = example(), f = fifo("pipe"), dev = link_to_dev_null("null");
  expect_refused(cli("plan " + quote(s) + " --out " + quote(f)), "a FIFO");
  expect_refused(cli("plan " + quote(s) + " --out " + quote(dev)), "a character device");
  EXPECT_TRUE(is_fifo(f));
  EXPECT_EQ(fs::read_symlink(dev), "/dev/null");
}

TEST_F(OutputSafetyTest, ReportOverItsOwnDatabaseIsRefused) {
  const std::string s = example();
  const std::string db = (dir_ / "r.sqlite").string();
  ASSERT_EQ(cli("run " + quote(s) + " --set output.sqlite=" + quote(db)).code, 0);
  const std::string before = read_file(db);
  expect_refused(cli("report " + quote(db) + " --html " + quote(db)), "is an input of this command");
  EXPECT_EQ(read_file(db), before);
}

TEST_F(OutputSafetyTest, SweepDatabaseOverTheScenarioIsRefused) {
  const std::string s = write("s.yaml", "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
                                        "sweep: {parallel.tp: [1, 2]}\n");
  const std::string before = read_file(s);
  expect_refused(cli("sweep " + quote(s) + " --out " + quote(s)), "is an input of this command");
  EXPECT_EQ(read_file(s), before);
}

// A stale `NAME.tmp` that links elsewhere is never opened: the file it names survives.
TEST_F(OutputSafetyTest, ATemporaryNameThatLinksElsewhereIsNotFollowed) {
  const std::string s = example();
  const std::string victim = write("victim.txt", "keep me\n");
  const std::string trace = (dir_ / "t.json").string();
  fs::create_symlink(victim, trace + ".tmp");
  ASSERT_EQ(cli("run " + quote(s) + " --set output.trace=" + quote(trace)).code, 0);
  EXPECT_EQ(read_file(victim), "keep me\n");
  EXPECT_NE(read_file(trace).find("traceEvents"), std::string::npos);
}

// A link to a regular file is written through: the link stays, its file is replaced.
TEST_F(OutputSafetyTest, ALinkToARegularFileIsWrittenThrough) {
  const std::string s = example();
  const std::string real = write("real.json", "old\n");
  const std::string link = (dir_ / "link.json").string();
  fs::create_symlink(real, link);
  ASSERT_EQ(cli("plan " + quote(s) + " --out " + quote(link)).code, 0);
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_NE(read_file(real).find("\"ranks\""), std::string::npos);
}

TEST_F(OutputSafetyTest, NoTemporaryIsLeftBeside) {
  const std::string s = example();
  ASSERT_EQ(cli("plan " + quote(s) + " --out " + quote((dir_ / "p.json").string())).code, 0);
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
}

// An interrupt while a new database is written leaves nothing behind: it is built under a
// temporary name beside its own and moved into place once whole, and SIGINT removes the
// temporary (a half-written file and its journal had stayed, and a later run refused the
// file as not a SQLite database). The process still ends as SIGINT ends it.
TEST_F(OutputSafetyTest, AnInterruptedRunLeavesNoDatabaseBehind) {
  const std::string s = write("f.yaml",
                              "cluster: {preset: dgx-a100, nodes: 2}\nmodel: {preset: gpt3-1.3b}\nparallel: {tp: 2}\n"
                              "training: {duration: 24h}\n"
                              "faults: {gpu_mtbf: 10s, restart: 10min, checkpoint_bandwidth: 1TB/s}\n"
                              "output: {sqlite: out.sqlite}\n");
  const std::string log = (dir_ / "log").string();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    if (::chdir(dir_.c_str()) == 0)
      ::execl(CLUSTERSIM_BINARY, "clustersim", "run", s.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // The temporary appears once the simulation is done; interrupt as soon as it is there.
  bool seen = false, ended = false;
  int status = 0;
  for (int i = 0; i < 600000 && !seen && !ended; ++i) {
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().filename().string().rfind(".out.sqlite.", 0) == 0) seen = true;
    if (!seen) {
      ended = ::waitpid(pid, &status, WNOHANG) == pid;
      ::usleep(200);
    }
  }
  if (seen) {
    ::kill(pid, SIGINT);
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  }
  ASSERT_TRUE(seen) << "the run ended (status " << status << ") before its database's temporary was seen";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << status << ": " << read_file(log);
  for (const auto& e : fs::directory_iterator(dir_)) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name == "f.yaml" || name == "log" || name == "capture") << name;
  }
}

// Runs that create one database at once all land in it: each builds its own under a
// temporary name, the first moves into place, the others append beside it (three of four
// had failed with "appeared while it was written" and lost their runs).
TEST_F(OutputSafetyTest, RunsCreatingOneDatabaseAtOnceAllLand) {
  const std::string s = example();
  const std::string db = (dir_ / "same.sqlite").string();
  std::string cmd = "cd " + quote(dir_.string()) + " && (";
  for (int i = 1; i <= 4; ++i)
    cmd += quote(CLUSTERSIM_BINARY) + " run " + quote(s) + " --set " + quote("output.sqlite=" + db) +
           " --set seed=" + std::to_string(i) + " >/dev/null 2>>err.txt & ";
  cmd += "wait)";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_EQ(read_file(dir_ / "err.txt"), "");
  sqlite3* c = nullptr;
  ASSERT_EQ(sqlite3_open_v2(db.c_str(), &c, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(c, "SELECT COUNT(*) FROM runs WHERE complete = 1", -1, &st, nullptr);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(st, 0), 4);
  sqlite3_finalize(st);
  sqlite3_close(c);
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

// ---- class 2: output that cannot be written ------------------------------------------------

// export-chakra names each trace after the scenario: a name that climbs out of --out or is
// hidden is refused, and nothing is written; every target is checked before the first is
// written (a FIFO among them leaves the folder as it was); a dangling link is not a folder.
TEST_F(OutputSafetyTest, ChakraExportWritesOnlyInsideItsFolderAndAllOrNothing) {
  write("victim.0.et", "keep");
  const std::string body =
      "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
      "parallel: {tp: 8}\n";
  for (const std::string& name : {std::string("../victim"), (dir_ / "abs").string(), std::string(),
                                  std::string(".hidden"), std::string("sub/x")}) {
    const std::string sc = write("n.yaml", "name: \"" + name + "\"\n" + body);
    fs::create_directories(dir_ / "out");
    expect_refused(cli("export-chakra " + quote(sc) + " --out out"), "cannot name the trace files");
    EXPECT_TRUE(fs::is_empty(dir_ / "out")) << name;
  }
  EXPECT_EQ(read_file(dir_ / "victim.0.et"), "keep");
  const std::string sc = write("e.yaml", "name: e\n" + body);
  const std::string f = fifo("traces/e.5.et");
  expect_refused(cli("export-chakra " + quote(sc) + " --out traces", 30), "is not a regular file");
  EXPECT_TRUE(is_fifo(f));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "traces"), fs::directory_iterator{}), 1);
  fs::create_symlink(dir_ / "nowhere", dir_ / "dangling");
  expect_refused(cli("export-chakra " + quote(sc) + " --out dangling"), "is a link to nothing");
}

// A name the file system would refuse (a component past 255 bytes) is refused before any
// work, whether or not its folders exist yet: nothing is written, no folder made (a run had
// written its database, made the trace's folder and then failed with exit 3).
TEST_F(OutputSafetyTest, ANameTooLongForTheFileSystemIsRefusedBeforeAnyWork) {
  const std::string s = example();
  const std::string long_name = std::string(300, 'T') + ".json";
  expect_refused(cli("run " + quote(s) + " --set output.sqlite=db/r.sqlite --set output.trace=new/" + long_name),
                 "has a name of 305 bytes");
  EXPECT_FALSE(fs::exists(dir_ / "db"));
  EXPECT_FALSE(fs::exists(dir_ / "new"));
  expect_refused(cli("run " + quote(s) + " --set output.sqlite=" + std::string(300, 'D') + "/r.sqlite"),
                 "expected names of at most 255 bytes");
  const std::string named = write("n.yaml", "name: " + std::string(300, 'n') + "\n" +
                                                "cluster: {preset: dgx-h100, nodes: 1}\n"
                                                "model: {preset: gpt3-1.3b, layers: 2}\nparallel: {tp: 8}\n");
  expect_refused(cli("export-chakra " + quote(named) + " --out traces"), "name is 300 bytes, too long");
  expect_refused(cli("export-chakra " + quote(s) + " --out a/" + std::string(300, 'x')), "--out has a name of 300");
  EXPECT_FALSE(fs::exists(dir_ / "traces"));
  EXPECT_FALSE(fs::exists(dir_ / "a"));
  // A database's name leaves room for its journal ("-journal" beside it): 250 bytes is
  // refused at once for a database, where the simulation had run and then failed with exit 3.
  const std::string db250 = std::string(243, 'j') + ".sqlite";
  expect_refused(cli("run " + quote(s) + " --set output.trace=null --set output.sqlite=" + db250),
                 "expected at most 247 for a SQLite database");
  expect_refused(cli("sweep " + quote(s) + " --out " + db250), "expected at most 247 for a SQLite database");
  EXPECT_FALSE(fs::exists(dir_ / db250));
  // A database output that is there but is no database is refused before any work (it had
  // failed at the end of the run, exit 3), and left as it was.
  write("notes.html", "<html>not a database</html>");
  expect_refused(cli("run " + quote(s) + " --set output.trace=null --set output.sqlite=notes.html"),
                 "exists and is not a SQLite database");
  expect_refused(cli("sweep " + quote(s) + " --out notes.html"), "exists and is not a SQLite database");
  EXPECT_EQ(read_file(dir_ / "notes.html"), "<html>not a database</html>");
  const std::string json250 = std::string(245, 'j') + ".json";  // a trace has no journal
  EXPECT_EQ(cli("run " + quote(s) + " --set output.sqlite=null --set output.trace=" + json250).code, 0);
}

// Inputs that would block a reader: a FIFO given as report's or validate's database is
// refused at once, not opened.
TEST_F(OutputSafetyTest, ADatabaseThatIsAFifoIsRefusedNotRead) {
  const std::string f = fifo("db.sqlite");
  expect_refused(cli("report db.sqlite --html r.html", 30), "not a regular file");
  EXPECT_FALSE(fs::exists(dir_ / "r.html"));
  const std::string s = example();
  expect_refused(cli("validate " + quote(s) + " --profile " + quote(s) + " --real-from db.sqlite", 30),
                 "not a regular file");
  EXPECT_TRUE(is_fifo(f));
}

TEST_F(OutputSafetyTest, RunJsonOnAFullDiskExits3) {
  const CliResult r = to_dev_full("run " + quote(example()) + " --json");
  EXPECT_EQ(r.code, 3) << r;
  EXPECT_NE(r.err.find("cannot write standard output"), std::string::npos) << r;
}

TEST_F(OutputSafetyTest, RunTableOnAFullDiskExits3) { EXPECT_EQ(to_dev_full("run " + quote(example())).code, 3); }

TEST_F(OutputSafetyTest, PlanOnAFullDiskExits3) { EXPECT_EQ(to_dev_full("plan " + quote(example())).code, 3); }

TEST_F(OutputSafetyTest, CollectiveOnAFullDiskExits3) {
  EXPECT_EQ(to_dev_full("collective --op all-reduce --gpus 8 --cluster dgx-h100 --max 1MiB").code, 3);
  EXPECT_EQ(to_dev_full("collective --op all-reduce --gpus 8 --cluster dgx-h100 --max 1MiB --json").code, 3);
}

TEST_F(OutputSafetyTest, KeysAndHelpOnAFullDiskExit3) {
  EXPECT_EQ(to_dev_full("keys").code, 3);
  EXPECT_EQ(to_dev_full("--help").code, 3);
}

}  // namespace

namespace {

// `clustersim accuracy DIR`: every scenario with a reference, predicted against it.
class AccuracyTest : public CliTest {};

TEST_F(AccuracyTest, ReportsEveryCaseWithItsErrorAndTheMape) {
  const std::string train =
      "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\nparallel: {tp: 8}\n";
  write("cases/common.yaml", "cluster: {preset: dgx-h100, nodes: 1}\n");  // no reference: not a case
  write("cases/a.yaml", train + "reference: {metric: iteration_time_s, value: 1, unit: ms, source: \"A\"}\n");
  write("cases/sub/b.yaml", train + "reference: {metric: mfu, value: 50, unit: \"%\", source: \"B\"}\n");
  const CliResult r = cli("accuracy cases --json");
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_NE(r.out.find("\"name\": \"a\""), std::string::npos) << r;
  EXPECT_NE(r.out.find("\"name\": \"b\""), std::string::npos) << r;
  EXPECT_EQ(r.out.find("common"), std::string::npos) << r;
  // Units convert to the metric's own: 1 ms is 0.001 s, 50 % is 0.5.
  EXPECT_NE(r.out.find("\"reference\": 0.001,"), std::string::npos) << r;
  EXPECT_NE(r.out.find("\"reference\": 0.5,"), std::string::npos) << r;
  for (const char* f : {"\"cases\": [", "\"mape_pct\": ", "\"max_abs_error_pct\": ", "\"kind\": \"training\"",
                        "\"source\": \"A\"", "\"metric\": \"mfu\"", "\"predicted\": ", "\"error_pct\": "})
    EXPECT_NE(r.out.find(f), std::string::npos) << f << "\n" << r;
  const CliResult table = cli("accuracy cases");
  EXPECT_NE(table.out.find("2 cases: MAPE"), std::string::npos) << table;
}

// A published run that the memory check would refuse is still predicted; the check's
// verdict is reported beside it (the memory model's miss), where `run` refuses it.
TEST_F(AccuracyTest, ARunTheMemoryCheckRefusesIsPredictedAndFlagged) {
  const std::string big =
      "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, seq_len: 16384}\nparallel: {dp: 8, micro_batch: 8}\n"
      "training: {global_batch: 64}\n";
  write("cases/big.yaml", big + "reference: {metric: mfu, value: 50, unit: \"%\", source: \"A\"}\n");
  write("cases/small.yaml", "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
                            "parallel: {tp: 8}\nreference: {metric: mfu, value: 50, unit: \"%\", source: \"B\"}\n");
  EXPECT_NE(cli("run cases/big.yaml").err.find("does not fit in memory"), std::string::npos);
  const CliResult r = cli("accuracy cases --json");
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_NE(r.out.find("\"memory_fits\": false"), std::string::npos) << r;
  EXPECT_NE(r.out.find("\"memory_fits\": true"), std::string::npos) << r;
  EXPECT_NE(r.out.find("\"memory_refused\": [\"big\"]"), std::string::npos) << r;
  const CliResult table = cli("accuracy cases");
  EXPECT_NE(table.out.find("memory check: "), std::string::npos) << table;
  EXPECT_NE(table.out.find("the check would refuse 1 of these runs"), std::string::npos) << table;
}

// A source that counts attention over the whole square (Megatron-LM's FLOP count until
// 2025-03) reports the same step as a higher FLOP rate: the prediction is converted to its
// count. For a GPT layer the two counts differ only in the s/h term of
// 12·l·h²·(1 + kv/heads + s/h + ffn/h + V/(2·l·h)) per token: causal halves it.
TEST_F(AccuracyTest, AFullSquareFlopCountIsPredictedInTheSourcesCount) {
  const std::string train =
      "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2, seq_len: 4096}\n"
      "parallel: {tp: 8}\n";
  write("cases/causal.yaml", train + "reference: {metric: tflops_per_gpu, value: 400, source: \"A\"}\n");
  write("cases/full.yaml",
        train + "reference: {metric: tflops_per_gpu, value: 400, source: \"A\", attention_flops: full}\n");
  const CliResult r = cli("accuracy cases --json");
  ASSERT_EQ(r.code, 0) << r;
  auto number_after = [&](const std::string& key, size_t from) {
    const size_t at = r.out.find(key, from);
    EXPECT_NE(at, std::string::npos) << key << "\n" << r;
    return at == std::string::npos ? 0.0 : std::stod(r.out.substr(at + key.size()));
  };
  const size_t causal = r.out.find("\"name\": \"causal\""), full = r.out.find("\"name\": \"full\"");
  ASSERT_NE(causal, std::string::npos);
  ASSERT_NE(full, std::string::npos);
  const double factor = number_after("\"flops_count_factor\": ", full);
  EXPECT_NEAR(number_after("\"predicted\": ", full) / number_after("\"predicted\": ", causal), factor, 1e-9);
  // gpt3-1.3b: h 2048, 16 heads (MHA), ffn 4h, vocab 50,257 padded to 50,304 at tp 8.
  const double h = 2048, s = 4096, l = 2, v = 50304;
  const double megatron = 1 + 1 + s / h + 4 + v / (2 * l * h), ours = megatron - s / (2 * h);
  EXPECT_NEAR(factor, megatron / ours, 0.005 * factor) << r;
  // Only a model-FLOP figure of a training run has a count to convert.
  write("cases/full.yaml",
        train + "reference: {metric: iteration_time_s, value: 1, source: \"A\", attention_flops: full}\n");
  const CliResult bad = cli("accuracy cases");
  EXPECT_EQ(bad.code, 1) << bad;
  EXPECT_NE(bad.err.find("reference.attention_flops: full converts a model-FLOP figure, expected reference.metric "
                         "tflops_per_gpu or mfu"),
            std::string::npos)
      << bad;
}

// A what-if over the published set: --set changes every case as `run --set` would, --only
// keeps the files whose name matches; a case that refuses the override is named, exit 1.
TEST_F(AccuracyTest, SetAndOnlyRunAWhatIfOverTheCases) {
  const std::string train =
      "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\nparallel: {tp: 8}\n"
      "reference: {metric: iteration_time_s, value: 1, unit: ms, source: \"A\"}\n";
  write("cases/tp8-a.yaml", train);
  write("cases/tp8-b.yaml", train);
  write("cases/other.yaml", train);
  auto predicted = [](const CliResult& r, const std::string& name) {
    const size_t at = r.out.find("\"predicted\": ", r.out.find("\"name\": \"" + name + "\""));
    return at == std::string::npos ? 0.0 : std::stod(r.out.substr(at + 13));
  };
  const CliResult base = cli("accuracy cases --json --only 'tp8-*'");
  ASSERT_EQ(base.code, 0) << base;
  EXPECT_EQ(base.out.find("\"name\": \"other\""), std::string::npos) << base;
  EXPECT_NE(base.out.find("\"only\": [\"tp8-*\"]"), std::string::npos) << base;
  const CliResult slow = cli("accuracy cases --json --only 'tp8-*' --set training.step_overhead=100ms");
  ASSERT_EQ(slow.code, 0) << slow;
  EXPECT_NEAR(predicted(slow, "tp8-a") - predicted(base, "tp8-a"), 0.1 - 0.003, 1e-6) << slow;  // over the 3 ms default
  EXPECT_NE(slow.out.find("\"set\": [\"training.step_overhead=100ms\"]"), std::string::npos) << slow;
  const CliResult table = cli("accuracy cases --only 'tp8-*' --set training.step_overhead=100ms");
  EXPECT_NE(table.out.find("what-if: --set training.step_overhead=100ms --only tp8-*"), std::string::npos) << table;
  EXPECT_NE(table.out.find("  training 2: MAPE"), std::string::npos) << table;
  EXPECT_EQ(table.out.find("  serving "), std::string::npos) << table;  // no serving case, no line
  const CliResult refused = cli("accuracy cases --only other --set training.train_metrics=2");
  EXPECT_EQ(refused.code, 1) << refused;
  EXPECT_NE(refused.err.find("training.train_metrics"), std::string::npos) << refused;
  EXPECT_NE(refused.err.find("other.yaml: --set 'training.train_metrics=2'"), std::string::npos)
      << "the case that refused it is named\n"
      << refused;
  // Nothing ran: --json still prints its object, with the failure.
  const CliResult refused_json = cli("accuracy cases --only other --set training.train_metrics=2 --json");
  EXPECT_EQ(refused_json.code, 1) << refused_json;
  EXPECT_NE(refused_json.out.find("\"cases\": [], \"mape_pct\": null"), std::string::npos) << refused_json;
  EXPECT_NE(refused_json.out.find("\"failed\": [\""), std::string::npos) << refused_json;
  // --kind keeps one kind: a training override over a folder with a serving case.
  write("cases/serve.yaml",
        "cluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1}\nmodel: {preset: llama3-8b, layers: 2}\n"
        "inference: {requests: 16, arrivals: {process: closed, concurrency: 4}}\n"
        "reference: {metric: throughput_tokens_per_s, value: 1000, unit: tokens/s, source: \"S\"}\n");
  EXPECT_EQ(cli("accuracy cases --set training.step_overhead=100ms").code, 1);  // the serving case refuses it
  const CliResult training = cli("accuracy cases --json --kind training --set training.step_overhead=100ms");
  ASSERT_EQ(training.code, 0) << training;
  EXPECT_EQ(training.out.find("\"name\": \"serve\""), std::string::npos) << training;
  EXPECT_NE(training.out.find("\"kind\": \"training\"}"), std::string::npos) << training;
  const CliResult serving = cli("accuracy cases --json --kind serving");
  ASSERT_EQ(serving.code, 0) << serving;
  EXPECT_NE(serving.out.find("\"name\": \"serve\""), std::string::npos) << serving;
  EXPECT_EQ(serving.out.find("\"name\": \"other\""), std::string::npos) << serving;
  EXPECT_EQ(cli("accuracy cases --kind both").code, 2);
  // Settings accuracy would drop (files to write, a sweep, the references themselves) are
  // refused, not ignored; as are plan's output files and a sweep's trace.
  for (const char* set : {"output.sqlite=a.sqlite", "sweep.parallel.tp=[1,2]", "reference.value=3"}) {
    const CliResult dropped = cli(std::string("accuracy cases --set ") + set);
    EXPECT_EQ(dropped.code, 1) << dropped;
    EXPECT_NE(dropped.err.find("would be ignored"), std::string::npos) << dropped;
  }
  EXPECT_FALSE(fs::exists(dir_ / "a.sqlite"));
  EXPECT_NE(cli("plan cases/tp8-a.yaml --set output.sqlite=p.sqlite").err.find("would be ignored"), std::string::npos);
  EXPECT_NE(cli("sweep cases/tp8-a.yaml --set output.trace=t.json").err.find("would be ignored"), std::string::npos);
  // An override no case accepts: its errors alone, no empty table.
  const CliResult unknown = cli("accuracy cases --set model.nonsense=3");
  EXPECT_EQ(unknown.code, 1) << unknown;
  EXPECT_EQ(unknown.out, "") << unknown;
  EXPECT_NE(unknown.err.find("unknown key 'model.nonsense'"), std::string::npos) << unknown;
  const CliResult none = cli("accuracy cases --only 'nothing*'");
  EXPECT_EQ(none.code, 1) << none;
  EXPECT_NE(none.err.find("matches --only nothing*"), std::string::npos) << none;
}

// reference.unstated: what the source leaves open is predicted at every combination of
// the listed values; the case reports the band they span with its own prediction, and
// whether the reference lies inside. A combination the scenario refuses is counted.
TEST_F(AccuracyTest, UnstatedSettingsSpanABandAroundThePrediction) {
  const std::string train = "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
                            "parallel: {tp: 8}\ntraining: {global_batch: 4}\n";
  auto write_case = [&](double value) {
    write("cases/a.yaml", train + "reference:\n  metric: iteration_time_s\n  value: " + std::to_string(value) +
                              "\n  source: A\n  unstated:\n    parallel.micro_batch: [1, 2, 3, 4]\n"
                              "    training.step_overhead: [3ms, 50ms]\n");
  };
  auto number_after = [](const CliResult& r, const std::string& key) {
    const size_t at = r.out.find(key);
    return at == std::string::npos ? -1.0 : std::stod(r.out.substr(at + key.size()));
  };
  write_case(1000);
  const CliResult far = cli("accuracy cases --json");
  ASSERT_EQ(far.code, 0) << far;
  // micro-batch 3 does not divide the batch of 4: two of eight combinations refused.
  EXPECT_NE(far.out.find("\"unstated\": [\"parallel.micro_batch\", \"training.step_overhead\"]"), std::string::npos)
      << far;
  EXPECT_NE(far.out.find("\"band_points\": 6, \"band_refused\": 2, \"reference_in_band\": false"),
            std::string::npos)
      << far;
  const double predicted = number_after(far, "\"predicted\": ");
  const size_t band = far.out.find("\"band\": [");
  ASSERT_NE(band, std::string::npos) << far;
  const size_t comma = far.out.find(", ", band);
  const double low = std::stod(far.out.substr(band + 9)), high = std::stod(far.out.substr(comma + 2));
  EXPECT_LE(low, predicted);
  EXPECT_GE(high, predicted);
  // 47 ms more host work a step at least, whatever the micro-batch.
  EXPECT_GT(high - low, 0.047) << far;
  EXPECT_NE(far.out.find("\"unstated_cases\": 1, \"in_band_cases\": 0"), std::string::npos) << far;
  // Each combination that ran, with its values as the file wrote them (numbers as numbers),
  // its prediction and error; the nearest is the one closest to the reference.
  const size_t points = far.out.find("\"band_predictions\": [");
  ASSERT_NE(points, std::string::npos) << far;
  EXPECT_NE(far.out.find("{\"settings\": {\"parallel.micro_batch\": 1, \"training.step_overhead\": \"3ms\"}, "
                         "\"predicted\": ",
                         points),
            std::string::npos)
      << far;
  std::vector<double> predictions;
  for (size_t at = far.out.find("\"predicted\": ", points); at != std::string::npos;
       at = far.out.find("\"predicted\": ", at + 1))
    predictions.push_back(std::stod(far.out.substr(at + 13)));
  ASSERT_EQ(predictions.size(), 6u) << far;
  EXPECT_EQ(*std::min_element(predictions.begin(), predictions.end()), low);
  EXPECT_EQ(*std::max_element(predictions.begin(), predictions.end()), high);
  // The reference (1000 s) lies above every prediction: the slowest combination is nearest.
  const size_t slowest =
      static_cast<size_t>(std::max_element(predictions.begin(), predictions.end()) - predictions.begin());
  EXPECT_NE(far.out.find("\"band_nearest\": " + std::to_string(slowest) + "}"), std::string::npos) << far;
  const CliResult far_table = cli("accuracy cases");
  EXPECT_NE(far_table.out.find(", reference outside; nearest at parallel.micro_batch="), std::string::npos)
      << far_table;
  EXPECT_NE(far_table.out.find(" training.step_overhead=50ms: -"), std::string::npos) << far_table;
  write_case((low + high) / 2);
  const CliResult inside = cli("accuracy cases --json");
  EXPECT_NE(inside.out.find("\"reference_in_band\": true"), std::string::npos) << inside;
  EXPECT_NE(inside.out.find("\"in_band_cases\": 1"), std::string::npos) << inside;
  const CliResult table = cli("accuracy cases");
  EXPECT_NE(table.out.find(", reference inside; nearest at "), std::string::npos) << table;
  EXPECT_NE(table.out.find("unstated settings: 1 cases predicted over what their sources leave open; 1 hold"),
            std::string::npos)
      << table;
  // The same file's prediction and the rest of the table do not change with the band.
  EXPECT_EQ(number_after(inside, "\"predicted\": "), predicted);
  // A key the command line sets is no longer open: only the other one spans the band.
  const CliResult fixed = cli("accuracy cases --json --set parallel.micro_batch=2");
  ASSERT_EQ(fixed.code, 0) << fixed;
  EXPECT_NE(fixed.out.find("\"unstated\": [\"training.step_overhead\"], "), std::string::npos) << fixed;
  EXPECT_NE(fixed.out.find("\"band_points\": 2, \"band_refused\": 0"), std::string::npos) << fixed;
}

// A combination's values keep their YAML type in --json: true and false as booleans,
// numbers as numbers, the rest (a time with its unit) as strings.
TEST_F(AccuracyTest, UnstatedValuesKeepTheirTypeInJson) {
  auto run_with = [&](const std::string& entries) {
    write("cases/a.yaml",
          "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
          "parallel: {tp: 8}\ntraining: {global_batch: 4}\n"
          "reference:\n  metric: iteration_time_s\n  value: 1\n  source: A\n  unstated:\n" +
              entries);
    return cli("accuracy cases --json");
  };
  const CliResult r = run_with("    parallel.sequence_parallel: [false, true]\n");
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_NE(r.out.find("{\"settings\": {\"parallel.sequence_parallel\": false}, "), std::string::npos) << r;
  EXPECT_NE(r.out.find("{\"settings\": {\"parallel.sequence_parallel\": true}, "), std::string::npos) << r;
  const CliResult n = run_with("    cluster.board_spread: [0.01, 2e-2]\n    training.step_overhead: [3ms]\n");
  ASSERT_EQ(n.code, 0) << n;
  EXPECT_NE(n.out.find("{\"cluster.board_spread\": 0.01, \"training.step_overhead\": \"3ms\"}"), std::string::npos)
      << n;
  EXPECT_NE(n.out.find("{\"cluster.board_spread\": 2e-2, \"training.step_overhead\": \"3ms\"}"), std::string::npos)
      << n;
}

TEST_F(AccuracyTest, BadUnstatedSettingsAreInputErrorsAtTheirLine) {
  const std::string train = "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
                            "parallel: {tp: 8}\ntraining: {global_batch: 4}\n"
                            "reference:\n  metric: mfu\n  value: 0.3\n  source: A\n  unstated:\n";
  auto error_of = [&](const std::string& entries) {
    write("cases/a.yaml", train + entries);
    const CliResult r = cli("accuracy cases");
    EXPECT_EQ(r.code, 1) << r;
    return r.err;
  };
  EXPECT_NE(error_of("    model.nonsense: [1]\n").find("a.yaml:10:5: error: reference.unstated: unknown key "
                                                       "'model.nonsense', expected a setting of the run"),
            std::string::npos);
  EXPECT_NE(error_of("    reference.value: [1]\n").find("unknown key 'reference.value'"), std::string::npos);
  EXPECT_NE(error_of("    parallel.micro_batch: 2\n")
                .find("a.yaml:10:27: error: reference.unstated.parallel.micro_batch must be a non-empty list of values"),
            std::string::npos);
  EXPECT_NE(error_of("    parallel.micro_batch: [1, 2, 4, 8, 16, 32, 64, 128, 256]\n"
                     "    training.step_overhead: [1ms, 2ms, 3ms, 4ms, 5ms, 6ms, 7ms, 8ms]\n")
                .find("more than 64 combinations"),
            std::string::npos);
  EXPECT_NE(error_of("    parallel.micro_batch: [4, 4]\n")
                .find("reference.unstated.parallel.micro_batch: '4' is listed twice"),
            std::string::npos);
  // None of the combinations runs: the file's error, with the first refusal.
  EXPECT_NE(error_of("    parallel.micro_batch: [3, 5]\n").find("no combination of reference.unstated runs"),
            std::string::npos);
}

TEST_F(AccuracyTest, ABadReferenceIsAnInputErrorAtItsLine) {
  const std::string train = "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n";
  write("cases/a.yaml", train + "reference:\n  metric: mfu\n  value: 3\n  unit: s\n  source: x\n");
  const CliResult r = cli("accuracy cases");
  EXPECT_EQ(r.code, 1) << r;
  EXPECT_NE(r.err.find("cases/a.yaml:6:9: error: reference.unit 's' does not measure mfu, expected % or fraction"),
            std::string::npos)
      << r;
  // The units the message offers are the metric's own, each accepted.
  write("cases/a.yaml", train + "reference:\n  metric: iteration_time_s\n  value: 1\n  unit: tokens/s\n  source: x\n");
  EXPECT_NE(cli("accuracy cases").err.find("does not measure iteration_time_s, expected s, ms or us"), std::string::npos);
  write("cases/a.yaml", train + "reference:\n  metric: mfu\n  value: 3\n");
  const CliResult none = cli("accuracy cases");
  EXPECT_EQ(none.code, 1) << none;
  EXPECT_NE(none.err.find("reference.source is required"), std::string::npos) << none;
  write("cases/a.yaml", train + "reference:\n  metric: nonsense_s\n  value: 3\n  source: x\n");
  const CliResult unknown = cli("accuracy cases");
  EXPECT_NE(unknown.err.find("is not a metric of this run, expected one of: iteration_time_s"), std::string::npos)
      << unknown;
  // A count the run takes as given is not a prediction.
  write("cases/a.yaml", train + "reference:\n  metric: global_batch\n  value: 3\n  source: x\n");
  const CliResult given = cli("accuracy cases");
  EXPECT_NE(given.err.find("reference.metric 'global_batch' is not a metric of this run"), std::string::npos) << given;
  EXPECT_EQ(given.err.find(", dp, "), std::string::npos) << given;
  EXPECT_EQ(cli("accuracy nowhere").code, 1);
  EXPECT_EQ(cli("accuracy").code, 2);
  // A published figure: finite relative errors, and a fraction at most 1 (100 %).
  write("cases/a.yaml", train + "reference:\n  metric: tflops_per_gpu\n  value: 5e-324\n  source: x\n");
  EXPECT_NE(cli("accuracy cases").err.find("cases/a.yaml:5:10: error: reference.value = 5e-324 is outside"),
            std::string::npos);
  write("cases/a.yaml", train + "reference:\n  metric: mfu\n  value: 45\n  unit: fraction\n  source: x\n");
  EXPECT_NE(cli("accuracy cases").err.find("past 1, expected a fraction of at most 1"), std::string::npos);
  write("cases/a.yaml", train + "reference:\n  metric: mfu\n  value: 45\n  unit: \"%\"\n  source: x\n");
  const CliResult pct = cli("accuracy cases --json");
  EXPECT_EQ(pct.code, 0) << pct;
  // No serving case: the serving group's error is null, not 0.
  EXPECT_NE(pct.out.find("\"serving\": {\"cases\": 0, \"mape_pct\": null, \"max_abs_error_pct\": null}"),
            std::string::npos)
      << pct;
}

}  // namespace
