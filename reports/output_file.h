// Output files that never replace anything but the file they name.
//
// Every output clustersim writes (traces, HTML reports, plans, profiles) is written
// whole or not at all: the bytes go to a fresh temporary file created beside the target
// with O_EXCL (so nothing already there is opened or followed), and the temporary is
// renamed over the target when complete. A rename replaces whatever the name points
// at, so before the temporary is made and again just before the rename, the target must
// be absent or a regular file. A device node (/dev/null), a FIFO, a socket or a
// directory is refused, never replaced. A symbolic link is followed: the file it names is
// replaced and the link is kept. An interrupt removes the temporaries (install_signal_cleanup).
#pragma once

#include <cstdio>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

namespace clustersim {

struct OutputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Why `path` cannot be an output ("" when it can): it exists and is not a regular file
// (after following symbolic links), or it cannot be examined.
std::string output_path_problem(const std::string& path);

// True when `a` and `b` exist and are the same file (device and inode), whatever the
// paths that name them.
// Why the file system would refuse `path` as a name, whether or not its folders exist yet: a
// component past 255 bytes or the whole past 4,095 (Linux's NAME_MAX and PATH_MAX). Empty
// when it would not. A SQLite database's last name leaves room for its "-journal" beside it
// (247 bytes).
std::string path_name_problem(const std::string& path, bool database = false);
bool same_file(const std::string& a, const std::string& b);

// Temporary files an interrupt must not leave behind: SIGINT, SIGTERM or SIGHUP removes the
// registered ones (an AtomicFile's, a new database's and its journal) before the process ends
// as the signal would end it. Registration is thread-safe; a path past 4,095 bytes, or past
// the 256 held at once, is not registered (it is left as before: removed on an orderly exit).
void install_signal_cleanup();
class TempRegistration {
 public:
  TempRegistration() = default;
  explicit TempRegistration(const std::string& path);
  ~TempRegistration();
  TempRegistration(TempRegistration&& o) noexcept : slot_(o.slot_) { o.slot_ = -1; }
  TempRegistration& operator=(TempRegistration&& o) noexcept;
  TempRegistration(const TempRegistration&) = delete;
  TempRegistration& operator=(const TempRegistration&) = delete;

 private:
  int slot_ = -1;
};
// A fresh name beside `target` for a temporary, created exclusively (never following a link):
// ".NAME.PID.N.tmp", registered in `regs` with each of `suffixes` appended ("" for itself), the
// interrupts held off until it is (an interrupt between the two had left it). Returns the
// open descriptor; throws OutputError naming `shown`.
int create_temp_beside(const std::string& target, const std::string& shown, std::string& temp,
                       std::vector<TempRegistration>& regs, std::initializer_list<const char*> suffixes = {""});

class AtomicFile {
 public:
  // Creates the temporary file beside `path` (its directory must exist). Throws
  // OutputError naming `path` when it cannot be an output.
  explicit AtomicFile(const std::string& path);
  ~AtomicFile();  // removes the temporary unless committed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  std::FILE* file() { return file_; }
  void write(const std::string& bytes);
  // Flushes, closes and renames the temporary over the target. Throws OutputError (and
  // removes the temporary) when any of it fails or the target has become something
  // other than a regular file.
  void commit();

 private:
  std::string path_;    // as the caller named it (for messages)
  std::string target_;  // what the rename replaces: `path_` with symbolic links followed
  std::string temp_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
  std::vector<TempRegistration> registered_;
};

// Makes the folders above an output `path` that do not exist yet (the commands' output
// checks have found the nearest one that exists to be a writable directory).
void make_parent_dirs(const std::string& path);

// Writes `bytes` to `path` through an AtomicFile.
void write_file_atomically(const std::string& path, const std::string& bytes);

}  // namespace clustersim
