// The module's entry point (backend_module.hpp): what libtrainplan_backend_cuda.so exports to
// the registry. Also linked into the programs that link the CUDA library themselves (the GPU
// tests, the CUDA benchmarks), which export it so their registry uses their own copy.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "trainplan/core/error.hpp"
#include "trainplan/executor/backend_module.hpp"
#include "trainplan/executor/cuda_backend.hpp"
#include "trainplan/executor/cuda_benchmarks.hpp"
#if TRAINPLAN_HAVE_NCCL
#include "trainplan/executor/nccl_communicator.hpp"
#include "trainplan/executor/nccl_launch.hpp"
#endif

namespace {

template <size_t N>
void copy_text(const std::string& text, char (&out)[N]) {
  const size_t n = std::min(text.size(), N - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

int probe(TrainplanBackendError* error) {
  try {
    const std::string why = trainplan::executor::cuda_unavailable_reason();
    if (why.empty()) return 0;
    copy_text(why, error->message);
    copy_text("run on a machine with an NVIDIA GPU, or use the cpu backend", error->hint);
  } catch (const std::exception& e) {
    copy_text(e.what(), error->message);
  }
  return 1;
}

// Error text of an exception into `error` (the table's functions never throw).
void report(TrainplanBackendError* error) {
  try {
    throw;
  } catch (const trainplan::Error& e) {
    copy_text(e.message(), error->message);
    copy_text(e.hint_text(), error->hint);
  } catch (const std::exception& e) {
    copy_text(e.what(), error->message);
  }
}

trainplan::executor::Backend* create_on_device(int device, TrainplanBackendError* error) {
  try {
    trainplan::executor::CudaBackendOptions o;
    o.device = device;
    return trainplan::executor::make_cuda_backend(o).release();
  } catch (const std::exception&) {
    report(error);
  }
  return nullptr;
}

trainplan::executor::Backend* create(TrainplanBackendError* error) { return create_on_device(-1, error); }

#if TRAINPLAN_HAVE_NCCL
// The runtime's NCCL communicator of one rank (backend_module.hpp: create_communicator).
trainplan::executor::Communicator* create_communicator(trainplan::executor::Rendezvous* store, int rank, int world,
                                                       trainplan::executor::Backend* backend,
                                                       const trainplan::executor::CommGroup* groups, int n_groups,
                                                       const int* peers, int n_peers, double timeout_s,
                                                       TrainplanBackendError* error) {
  using namespace trainplan::executor;
  try {
    if (!store || !backend || n_groups < 0 || n_peers < 0 || (n_groups > 0 && !groups) || (n_peers > 0 && !peers))
      throw trainplan::Error("create_communicator: a null store, backend or list");
    NcclOptions o;
    o.timeout_s = timeout_s;
    for (int i = 0; i < n_groups; ++i) o.groups.push_back(groups[i]);
    for (int i = 0; i < n_peers; ++i) o.peers.push_back(peers[i]);
    return make_nccl_communicator(*store, rank, world, *backend, backend->default_stream(), o).release();
  } catch (const std::exception&) {
    report(error);
  }
  return nullptr;
}
#endif

// NCCL all-reduce from 1 KiB to max_bytes on `ranks` GPUs, one thread each (what
// `trainplan bench --backend cuda` measures; trainplan_bench_executor_cuda times the other
// collectives too).
int collective_benchmark(int ranks, long long max_bytes, char** json_out, TrainplanBackendError* error) {
  using namespace trainplan::executor;
  try {
#if !TRAINPLAN_HAVE_NCCL
    (void)ranks, (void)max_bytes, (void)json_out;
    throw trainplan::Error("this cuda module was built without NCCL")
        .hint("install NCCL (libnccl-dev) and build again; nccl-tests logs are calibrate inputs too");
#else
    const int have = cuda_device_count();
    if (ranks < 2 || ranks > have)
      throw trainplan::Error(fmt::format("an all-reduce over {} GPUs needs that many; this machine has {}", ranks, have))
          .hint("pass --ranks between 2 and the GPU count; one GPU has no collective to measure");
    trainplan::json::Json table;
    run_rank_threads(ranks, [&](int rank, Rendezvous& store) {
      auto be = make_cuda_backend();
      auto comm = make_nccl_communicator(store, rank, ranks, *be, be->default_stream());
      NcclBenchOptions o;
      o.max_bytes = max_bytes;
      o.collectives = {"all_reduce"};
      trainplan::json::Json t = run_nccl_benchmark(*comm, *be, o, cuda_device_info(cuda_backend_device(*be)).name);
      if (rank == 0) table = std::move(t);
    });
    const std::string text = table.dump();
    char* out = static_cast<char*>(std::malloc(text.size() + 1));
    if (!out) throw trainplan::Error("out of host memory for the benchmark table");
    std::memcpy(out, text.c_str(), text.size() + 1);
    *json_out = out;
    return 0;
#endif
  } catch (const trainplan::Error& e) {
    copy_text(e.message(), error->message);
    copy_text(e.hint_text(), error->hint);
  } catch (const std::exception& e) {
    copy_text(e.what(), error->message);
  }
  return 1;
}

void free_text(char* text) { std::free(text); }

int device_count() {
  try {
    return trainplan::executor::cuda_device_count();
  } catch (...) {
    return 0;
  }
}

const TrainplanBackendModule kModule = {kTrainplanBackendAbi, TRAINPLAN_VERSION, "cuda", TRAINPLAN_CUDA_BUILD,
                                        probe, create, collective_benchmark, free_text, device_count, create_on_device,
#if TRAINPLAN_HAVE_NCCL
                                        create_communicator
#else
                                        nullptr
#endif
};

}  // namespace

extern "C" TRAINPLAN_BACKEND_EXPORT const TrainplanBackendModule* trainplan_backend_register_cuda() {
  return &kModule;
}
