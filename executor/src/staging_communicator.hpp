// A communicator for tensors the host cannot read (GPU memory), built on one that moves host
// tensors (the in-process communicator): each operation copies its inputs to host tensors of
// a cpu backend, runs on `host`, and copies the results back when it completes. The runtime
// uses it to run a plan's ranks as threads on the GPUs there are (several ranks may share a
// GPU, which NCCL refuses). Floating tensors travel as f32 (f64 stays f64): the in-process
// reductions sum in double and round once; bf16 / f16 results are rounded back on upload.
#pragma once

#include <memory>

#include "trainplan/executor/backend.hpp"
#include "trainplan/executor/communicator.hpp"

namespace trainplan::executor {

/// A staging communicator for `device`'s tensors over `host`, or nullptr when `device`'s
/// memory is host-accessible (nothing to stage). Copies use device.default_stream() and
/// synchronize it. `host` and `device` must outlive the result.
std::unique_ptr<Communicator> make_staging_communicator(Communicator& host, Backend& device);

}  // namespace trainplan::executor
