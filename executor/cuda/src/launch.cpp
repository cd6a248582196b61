// One thread per GPU (nccl_launch.hpp): each thread's current device is rank % GPUs, all
// threads share an in-process rendezvous store. The stores and the launch environment are the
// CPU executor's (executor/src/launch.cpp).
#include <exception>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "check.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/executor/cuda_backend.hpp"
#include "trainplan/executor/nccl_launch.hpp"

namespace trainplan::executor {

void run_rank_threads(int world_size, const std::function<void(int rank, Rendezvous& store)>& fn) {
  if (world_size < 1) throw Error(fmt::format("run_rank_threads: needs at least one rank, got {}", world_size));
  std::shared_ptr<Rendezvous> store = make_in_process_rendezvous();
  const int gpus = cuda_device_count();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world_size));
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r)
    threads.emplace_back([&, r] {
      try {
        if (gpus > 0) TP_CUDA_CHECK(cudaSetDevice(r % gpus));
        fn(r, *store);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace trainplan::executor
