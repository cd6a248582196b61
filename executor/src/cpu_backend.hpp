// The CPU reference backend: host memory, synchronous "streams" (each call runs to completion
// before it returns), events that record the steady clock, and the templated kernels of
// cpu_kernels.hpp in f32 or f64. Created through the registry only.
#pragma once

#include <memory>

#include "trainplan/executor/backend.hpp"

namespace trainplan::executor {

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace trainplan::executor
