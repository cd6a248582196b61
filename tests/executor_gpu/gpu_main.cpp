// Main of the GPU test binary. Without a CUDA device it reports "skipped" (exit 77, CTest's
// SKIP_RETURN_CODE); with --host-only it runs just the tests tagged [host] (rendezvous, launch
// environment, check macros, calibration formats), which need no GPU and run everywhere.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <vector>

#include "trainplan/executor/cuda_backend.hpp"

int main(int argc, char** argv) {
  std::vector<char*> args;
  bool host_only = false;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--host-only") == 0)
      host_only = true;
    else
      args.push_back(argv[i]);
  }
  static char host_tag[] = "[host]";
  if (host_only) {
    args.push_back(host_tag);
  } else if (trainplan::executor::cuda_device_count() == 0) {
    std::printf("no CUDA device: skipped (%s)\n", trainplan::executor::cuda_unavailable_reason().c_str());
    return 77;
  }
  Catch::Session session;
  if (const int rc = session.applyCommandLine(static_cast<int>(args.size()), args.data()); rc != 0) return rc;
  return session.run();
}
