// The command's heap allocator (cmake/TrainplanDependencies.cmake, TRAINPLAN_WITH_JEMALLOC).
#include "allocator.hpp"

#include <fmt/format.h>

#ifdef TRAINPLAN_HAVE_JEMALLOC
#include <jemalloc/jemalloc.h>

// jemalloc reads this at its first allocation. A search allocates and frees some 700 MB of
// small objects on every core: extents backed by transparent huge pages take one page fault
// per 2 MiB instead of per 4 KiB (on kernels whose THP mode is "madvise", the default on
// Debian, jemalloc asks for them with madvise). The MALLOC_CONF environment variable still
// overrides each setting.
extern "C" {
// NOLINTNEXTLINE(readability-identifier-naming): the name jemalloc looks for
const char* malloc_conf = "thp:always,metadata_thp:auto";
}
#endif

namespace trainplan::cli {

std::string allocator_text() {
#ifdef TRAINPLAN_HAVE_JEMALLOC
  const char* version = "?";
  const char* thp = "?";
  size_t len = sizeof(const char*);
  (void)mallctl("version", static_cast<void*>(&version), &len, nullptr, 0);
  len = sizeof(const char*);
  (void)mallctl("opt.thp", static_cast<void*>(&thp), &len, nullptr, 0);
  return fmt::format("jemalloc {} (transparent huge pages: {})", version, thp);
#else
  return "the C library's malloc";
#endif
}

}  // namespace trainplan::cli
