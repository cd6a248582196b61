// Output files: atomic for regular files, in place for devices and FIFOs, errors reported.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "test_support.hpp"
#include "trainplan/core/output.hpp"

using namespace trainplan;
namespace fs = std::filesystem;

namespace {

// A fresh, empty folder under the system temp dir.
fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("trainplan-output-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t entries(const fs::path& dir) { return static_cast<size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator())); }

}  // namespace

TEST_CASE("output: a regular file is replaced whole, keeps its mode and leaves no temporary", "[core]") {
  const fs::path dir = scratch("regular");
  const fs::path f = dir / "plan.json";
  output::write_file(f.string(), "first\n");
  CHECK(slurp(f) == "first\n");
  ::chmod(f.c_str(), 0640);
  output::write_file(f.string(), "second\n");
  CHECK(slurp(f) == "second\n");
  struct stat st {};
  REQUIRE(::stat(f.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0640);
  CHECK(entries(dir) == 1);
  fs::remove_all(dir);
}

TEST_CASE("output: a file not committed leaves the old contents and no temporary", "[core]") {
  const fs::path dir = scratch("abandon");
  const fs::path f = dir / "out.txt";
  output::write_file(f.string(), "old");
  {
    output::File out(f.string());
    out.write("new, half written");
  }
  CHECK(slurp(f) == "old");
  CHECK(entries(dir) == 1);
  fs::remove_all(dir);
}

TEST_CASE("output: a symbolic link stays a link and its target gets the new contents", "[core]") {
  const fs::path dir = scratch("link");
  output::write_file((dir / "real.json").string(), "a");
  fs::create_symlink("real.json", dir / "link.json");
  output::write_file((dir / "link.json").string(), "b");
  CHECK(fs::is_symlink(dir / "link.json"));
  CHECK(slurp(dir / "real.json") == "b");
  CHECK(entries(dir) == 2);
  fs::remove_all(dir);
}

TEST_CASE("output: /dev/null stays a character device", "[core]") {
  output::write_file("/dev/null", "discarded");
  struct stat st {};
  REQUIRE(::stat("/dev/null", &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
}

TEST_CASE("output: a full device reports the write error", "[core]") {
  if (!fs::exists("/dev/full")) {
    WARN("no /dev/full on this machine");
    return;
  }
  REQUIRE_ERROR_CONTAINS(output::write_file("/dev/full", std::string(100000, 'x')), "/dev/full: write failed: No space left on device");
}

TEST_CASE("output: a FIFO is written in place, not replaced", "[core]") {
  const fs::path dir = scratch("fifo");
  const fs::path f = dir / "pipe";
  REQUIRE(::mkfifo(f.c_str(), 0600) == 0);
  std::string got;
  std::thread reader([&] { got = slurp(f); });
  output::write_file(f.string(), "through the pipe");
  reader.join();
  CHECK(got == "through the pipe");
  CHECK(fs::is_fifo(f));
  CHECK(entries(dir) == 1);
  fs::remove_all(dir);
}

TEST_CASE("output: directories, missing folders and empty paths are refused with the path", "[core]") {
  const fs::path dir = scratch("bad");
  REQUIRE_ERROR_CONTAINS(output::write_file(dir.string(), "x"), "is a directory, not a file");
  REQUIRE_ERROR_CONTAINS(output::write_file((dir / "no" / "such" / "file").string(), "x"), "does not exist");
  REQUIRE_ERROR_CONTAINS(output::write_file("", "x"), "the output path is empty");
  CHECK(entries(dir) == 0);
  fs::remove_all(dir);
}
