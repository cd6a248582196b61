// The command's heap allocator (cmake/TrainplanDependencies.cmake, TRAINPLAN_WITH_JEMALLOC).
#include "allocator.hpp"

#include <fmt/format.h>

#include <string>

#ifdef TRAINPLAN_HAVE_JEMALLOC
#include <jemalloc/jemalloc.h>
#include <sys/types.h>

// jemalloc reads this at its first allocation. A search allocates and frees some 700 MB of
// small objects on every core: extents backed by transparent huge pages take one page fault
// per 2 MiB instead of per 4 KiB (on kernels whose THP mode is "madvise", the default on
// Debian, jemalloc asks for them with madvise). Freed pages are kept rather than returned to the
// kernel on a timer (dirty / muzzy decay off): a search frees and reallocates its candidate pools
// stage after stage, and every page handed back and faulted in again is zeroed by the kernel
// again (the README job: 6,000 page faults and 3.15-3.57 s with the default 10 s decay, 3,350
// and 3.06-3.18 s without; peak RSS unchanged at 560 MB). The MALLOC_CONF environment variable
// still overrides each setting.
extern "C" {
// NOLINTNEXTLINE(readability-identifier-naming): the name jemalloc looks for
const char* malloc_conf = "thp:always,metadata_thp:auto,dirty_decay_ms:-1,muzzy_decay_ms:-1";
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
  ssize_t dirty_decay_ms = 0;
  len = sizeof(dirty_decay_ms);
  (void)mallctl("opt.dirty_decay_ms", static_cast<void*>(&dirty_decay_ms), &len, nullptr, 0);
  return fmt::format("jemalloc {} (transparent huge pages: {}; freed pages {})", version, thp,
                     dirty_decay_ms < 0 ? std::string("kept") : fmt::format("returned after {} ms", dirty_decay_ms));
#else
  return "the C library's malloc";
#endif
}

}  // namespace trainplan::cli
