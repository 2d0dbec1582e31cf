#include "reports/output_file.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>

namespace clustersim {
namespace {

namespace fs = std::filesystem;

std::string errno_text(int e) { return std::strerror(e); }

// What kind of thing `st` is, for a refusal.
std::string kind_of(const struct stat& st) {
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "not a regular file";
}

// `path` with symbolic links followed, when it exists; else `path`. Throws OutputError
// for a link that leads nowhere (writing through it would create a file elsewhere).
std::string resolve_target(const std::string& path) {
  struct stat lst{};
  if (::lstat(path.c_str(), &lst) != 0) return path;
  if (!S_ISLNK(lst.st_mode)) return path;
  std::error_code ec;
  const fs::path real = fs::canonical(path, ec);
  if (ec) throw OutputError(path + " is a symbolic link to nothing, expected a regular file or a new path");
  return real.string();
}

std::atomic<unsigned> temp_counter{0};

// The registered temporaries, read by the signal handler: a slot's path is whole while its
// state is kLive (written before the state is published, cleared only after it is withdrawn).
constexpr int kSlots = 256;
constexpr int kFree = 0, kWriting = 1, kLive = 2;
struct TempSlot {
  std::atomic<int> state{kFree};
  char path[4096];
};
TempSlot temp_slots[kSlots];

extern "C" void remove_temps_and_reraise(int sig) {
  for (TempSlot& s : temp_slots)
    if (s.state.load(std::memory_order_acquire) == kLive) ::unlink(s.path);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

void install_signal_cleanup() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction sa {};
    sa.sa_handler = remove_temps_and_reraise;
    sigemptyset(&sa.sa_mask);
    struct sigaction old {};
    // A signal the caller ignores (nohup's SIGHUP) stays ignored.
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    ::sigaction(sig, &sa, nullptr);
  }
}

TempRegistration::TempRegistration(const std::string& path) {
  if (path.size() >= sizeof(TempSlot::path)) return;
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (!temp_slots[i].state.compare_exchange_strong(expected, kWriting, std::memory_order_acq_rel)) continue;
    std::memcpy(temp_slots[i].path, path.c_str(), path.size() + 1);
    temp_slots[i].state.store(kLive, std::memory_order_release);
    slot_ = i;
    return;
  }
}

TempRegistration::~TempRegistration() {
  if (slot_ >= 0) temp_slots[slot_].state.store(kFree, std::memory_order_release);
}

TempRegistration& TempRegistration::operator=(TempRegistration&& o) noexcept {
  if (this != &o) {
    if (slot_ >= 0) temp_slots[slot_].state.store(kFree, std::memory_order_release);
    slot_ = o.slot_;
    o.slot_ = -1;
  }
  return *this;
}

int create_temp_beside(const std::string& target, const std::string& shown, std::string& temp,
                       std::vector<TempRegistration>& regs, std::initializer_list<const char*> suffixes) {
  const fs::path t(target);
  const fs::path dir = t.parent_path().empty() ? fs::path(".") : t.parent_path();
  const std::string base = t.filename().string();
  // The interrupts wait while the file exists unregistered (in this thread: outputs are
  // written once the worker threads have joined).
  sigset_t held, before;
  sigemptyset(&held);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&held, sig);
  ::pthread_sigmask(SIG_BLOCK, &held, &before);
  struct Restore {
    sigset_t* mask;
    ~Restore() { ::pthread_sigmask(SIG_SETMASK, mask, nullptr); }
  } restore{&before};
  // A fresh name, created exclusively and never followed: an existing file, link or
  // device of that name is left alone and another name is tried.
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::string name = "." + base.substr(0, 200) + "." + std::to_string(::getpid()) + "." +
                             std::to_string(temp_counter.fetch_add(1)) + ".tmp";
    const std::string candidate = (dir / name).string();
    const int fd = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0) {
      if (errno == EEXIST) continue;
      throw OutputError("cannot write " + shown + ": " + errno_text(errno));
    }
    temp = candidate;
    for (const char* suffix : suffixes) regs.emplace_back(temp + suffix);
    return fd;
  }
  throw OutputError("cannot write " + shown + ": no free temporary name beside it");
}

std::string output_path_problem(const std::string& path) {
  if (path.empty()) return "an empty path";
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {  // a new path (a missing or blocked folder is the caller's to report)
      struct stat lst{};
      if (::lstat(path.c_str(), &lst) == 0) return "a symbolic link to nothing";
      return "";
    }
    return "a path that cannot be examined (" + errno_text(errno) + ")";
  }
  if (!S_ISREG(st.st_mode)) return kind_of(st);
  return "";
}

std::string path_name_problem(const std::string& path, bool database) {
  if (path.size() > 4095)
    return "is " + std::to_string(path.size()) + " bytes long, expected a path of at most 4,095 bytes";
  for (size_t at = 0; at < path.size();) {
    const size_t slash = path.find('/', at);
    const size_t len = (slash == std::string::npos ? path.size() : slash) - at;
    if (len > 255)
      return "has a name of " + std::to_string(len) + " bytes ('" + path.substr(at, 16) +
             "...'), expected names of at most 255 bytes";
    if (slash == std::string::npos) {
      if (database && len > 255 - 8)
        return "has a name of " + std::to_string(len) + " bytes ('" + path.substr(at, 16) +
               "...'), expected at most 247 for a SQLite database (its journal adds '-journal' to the name)";
      break;
    }
    at = slash + 1;
  }
  return "";
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa{}, sb{};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

AtomicFile::AtomicFile(const std::string& path) : path_(path) {
  if (const std::string why = output_path_problem(path); !why.empty())
    throw OutputError("cannot write " + path + ": it is " + why + ", expected a regular file or a new path");
  target_ = resolve_target(path);
  const int fd = create_temp_beside(target_, path, temp_, registered_);
  file_ = ::fdopen(fd, "wb");
  if (!file_) {
    const int e = errno;
    ::close(fd);
    ::unlink(temp_.c_str());
    temp_.clear();
    throw OutputError("cannot write " + path + ": " + errno_text(e));
  }
}

AtomicFile::~AtomicFile() {
  if (file_) std::fclose(file_);
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicFile::write(const std::string& bytes) {
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size())
    throw OutputError("cannot write " + path_ + ": " + errno_text(errno));
}

void AtomicFile::commit() {
  std::FILE* f = file_;
  file_ = nullptr;
  const bool flushed = std::fflush(f) == 0 && !std::ferror(f);
  const int flush_errno = errno;
  if (std::fclose(f) != 0 || !flushed)
    throw OutputError("cannot write " + path_ + ": " + errno_text(flushed ? errno : flush_errno));
  // Checked again: the target may have been replaced by something else meanwhile.
  if (const std::string why = output_path_problem(target_); !why.empty())
    throw OutputError("cannot write " + path_ + ": it is " + why + ", expected a regular file or a new path");
  if (std::rename(temp_.c_str(), target_.c_str()) != 0)
    throw OutputError("cannot write " + path_ + ": " + errno_text(errno));
  committed_ = true;
  registered_.clear();
}

void make_parent_dirs(const std::string& path) {
  const fs::path dir = fs::path(path).parent_path();
  if (!dir.empty()) fs::create_directories(dir);
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  AtomicFile f(path);
  f.write(bytes);
  f.commit();
}

}  // namespace clustersim
