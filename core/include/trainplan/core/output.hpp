// File: trainplan/core/output.hpp
//
// Every file trainplan writes goes through here, so outputs behave the same everywhere:
//
//   output::write_file("plan.json", text);    // regular file: temporary + rename, atomic
//   output::write_file("-", text);            // stdout
//   output::write_file("/dev/null", text);    // character device or FIFO: written directly
//
//   output::File out("trace.json");           // streaming: write pieces, then commit()
//   out.write("[");  ...  out.commit();       // destroyed without commit(): nothing replaced
//
// A regular file (or a new path) is written to a temporary beside it and renamed over it
// only after every byte is on disk, so a failed write never leaves a half file; the
// temporary is removed on every error. Anything that is not a regular file (/dev/null,
// /dev/stdout, a FIFO) is never replaced: it is opened and written in place. Write errors
// (ENOSPC, EIO, EPIPE...) throw trainplan::Error naming the path and the system's reason.
#pragma once

#include <string>
#include <string_view>

namespace trainplan::output {

class File {
 public:
  /// Opens `path` for writing ("-" is stdout). Throws Error if it cannot (missing folder,
  /// a directory, no permission).
  explicit File(std::string path);
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  /// Removes the temporary if commit() was not reached.
  ~File();

  void write(std::string_view bytes);
  /// Flushes, checks for errors and, for regular files, renames the temporary over the path.
  void commit();

  const std::string& path() const { return path_; }

 private:
  void fail(const std::string& what, int err);
  std::string path_;    // as the user wrote it
  std::string target_;  // where the rename goes (the resolved path for a symbolic link)
  std::string temp_;    // empty when writing in place
  int fd_ = -1;
  bool owns_fd_ = false;
  bool committed_ = false;
};

/// Writes `bytes` to `path` with File (one call: open, write, commit).
void write_file(const std::string& path, std::string_view bytes);

}  // namespace trainplan::output
