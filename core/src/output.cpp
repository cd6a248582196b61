#include "trainplan/core/output.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "trainplan/core/error.hpp"

namespace trainplan::output {
namespace {

std::string reason(int err) { return std::strerror(err); }

// Paths under /dev and /proc name streams (/dev/stdout, /proc/self/fd/1) even when they
// resolve to a regular file: replacing that file would detach it from whoever opened it.
bool is_stream_path(const std::string& path) { return path.rfind("/dev/", 0) == 0 || path.rfind("/proc/", 0) == 0; }

mode_t new_file_mode() {
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return static_cast<mode_t>(0666 & ~mask);
}

}  // namespace

File::File(std::string path) : path_(std::move(path)) {
  if (path_.empty()) throw Error("the output path is empty").hint("give a file name, or - for standard output");
  if (path_ == "-") {
    std::fflush(stdout);
    fd_ = STDOUT_FILENO;
    return;
  }
  struct stat st {};
  const bool exists = ::stat(path_.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode))
    throw Error("is a directory, not a file").at(path_).hint("give the path of a file to write");
  if ((exists && !S_ISREG(st.st_mode)) || (exists && is_stream_path(path_))) {
    // A device, FIFO or stream: written in place, never replaced.
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) throw Error("cannot open for writing: " + reason(errno)).at(path_).hint("check the permissions");
    owns_fd_ = true;
    return;
  }
  target_ = path_;
  if (exists) {
    // A symbolic link to a regular file: replace the file, keep the link.
    char resolved[PATH_MAX];
    if (::realpath(path_.c_str(), resolved) != nullptr) target_ = resolved;
  }
  const std::filesystem::path target(target_);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  std::string pattern = (dir / ("." + target.filename().string() + ".tmp.XXXXXX")).string();
  fd_ = ::mkstemp(pattern.data());
  if (fd_ < 0) {
    const int err = errno;
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec))
      throw Error(fmt::format("cannot write the file: the folder {} does not exist", dir.string())).at(path_).hint("create the folder first");
    throw Error("cannot write the file: " + reason(err)).at(path_).hint("check that the folder is writable");
  }
  owns_fd_ = true;
  temp_ = pattern;
  ::fchmod(fd_, exists ? (st.st_mode & 07777) : new_file_mode());
}

File::~File() {
  if (owns_fd_ && fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
}

void File::fail(const std::string& what, int err) {
  if (owns_fd_ && fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
  throw Error(fmt::format("{}: {}", what, reason(err)))
      .at(path_ == "-" ? "<stdout>" : path_)
      .hint(err == ENOSPC ? "free some disk space or write somewhere else" : "check the path, the permissions and the free space");
}

void File::write(std::string_view bytes) {
  TP_ASSERT(fd_ >= 0 && !committed_);
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write failed", errno);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void File::commit() {
  TP_ASSERT(fd_ >= 0 && !committed_);
  if (owns_fd_) {
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) fail("write failed", errno);
  }
  if (!temp_.empty()) {
    if (::rename(temp_.c_str(), target_.c_str()) != 0) fail("cannot replace the file", errno);
    temp_.clear();
  }
  committed_ = true;
}

void write_file(const std::string& path, std::string_view bytes) {
  File out(path);
  out.write(bytes);
  out.commit();
}

}  // namespace trainplan::output
