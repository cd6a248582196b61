// The heap allocator the command was built with, for --version.
#pragma once

#include <string>

namespace trainplan::cli {

/// "jemalloc 5.3.0-... (transparent huge pages: always)", or the C library's malloc.
std::string allocator_text();

}  // namespace trainplan::cli
