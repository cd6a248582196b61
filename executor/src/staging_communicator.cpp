// Staging communicator (staging_communicator.hpp).
#include "staging_communicator.hpp"

#include <functional>
#include <vector>

#include <fmt/format.h>

#include "trainplan/core/error.hpp"
#include "trainplan/executor/registry.hpp"

namespace trainplan::executor {
namespace {

// The host dtype a device tensor travels in.
DType host_dtype(DType t) {
  if (t == DType::f64 || t == DType::i32) return t;
  return DType::f32;
}

class StagingRequest final : public CommRequest {
 public:
  StagingRequest(std::shared_ptr<CommRequest> inner, std::function<void()> copy_back)
      : inner_(std::move(inner)), copy_back_(std::move(copy_back)) {}
  bool test() override {
    if (done_) return true;
    if (!inner_->test()) return false;
    finish();
    return true;
  }
  void wait() override {
    if (done_) return;
    inner_->wait();
    finish();
  }
  double completed_at_s() const override { return inner_->completed_at_s(); }
  std::string describe() const override { return inner_->describe(); }
  const std::shared_ptr<CommRequest>& inner() const { return inner_; }

 private:
  void finish() {
    done_ = true;
    if (copy_back_) copy_back_();
    copy_back_ = nullptr;
  }
  std::shared_ptr<CommRequest> inner_;
  std::function<void()> copy_back_;
  bool done_ = false;
};

class StagingCommunicator final : public Communicator {
 public:
  StagingCommunicator(Communicator& host, Backend& device)
      : host_(host), device_(device), cpu_(make_backend("cpu")), stream_(device.default_stream()) {}

  int rank() const override { return host_.rank(); }
  int world_size() const override { return host_.world_size(); }
  double timeout_s() const override { return host_.timeout_s(); }

  std::shared_ptr<CommRequest> start_all_reduce(const CommGroup& g, int64_t tag, const Tensor& data,
                                                ReduceOp op) override {
    Tensor h = stage_in(data);
    return wrap(host_.start_all_reduce(g, tag, h, op), h, data);
  }
  std::shared_ptr<CommRequest> start_reduce_scatter(const CommGroup& g, int64_t tag, const Tensor& out,
                                                    const Tensor& in, ReduceOp op) override {
    Tensor h_in = stage_in(in), h_out = host_like(out);
    return wrap(host_.start_reduce_scatter(g, tag, h_out, h_in, op), h_out, out, h_in);
  }
  std::shared_ptr<CommRequest> start_all_gather(const CommGroup& g, int64_t tag, const Tensor& out,
                                                const Tensor& in) override {
    Tensor h_in = stage_in(in), h_out = host_like(out);
    return wrap(host_.start_all_gather(g, tag, h_out, h_in), h_out, out, h_in);
  }
  std::shared_ptr<CommRequest> start_broadcast(const CommGroup& g, int64_t tag, const Tensor& data, int root) override {
    Tensor h = stage_in(data);
    return wrap(host_.start_broadcast(g, tag, h, root), h, data);
  }
  std::shared_ptr<CommRequest> start_reduce(const CommGroup& g, int64_t tag, const Tensor& data, ReduceOp op,
                                            int root) override {
    Tensor h = stage_in(data);
    return wrap(host_.start_reduce(g, tag, h, op, root), h, data);
  }
  std::shared_ptr<CommRequest> start_barrier(const CommGroup& g, int64_t tag) override {
    return host_.start_barrier(g, tag);
  }
  std::shared_ptr<CommRequest> start_send(int peer, int64_t tag, const Tensor& data) override {
    Tensor h = stage_in(data);
    return wrap(host_.start_send(peer, tag, h), Tensor(), Tensor(), h);
  }
  std::shared_ptr<CommRequest> start_recv(int peer, int64_t tag, const Tensor& data) override {
    Tensor h = host_like(data);
    return wrap(host_.start_recv(peer, tag, h), h, data);
  }

  std::shared_ptr<CommRequest> start_all_to_all_v(const CommGroup& g, int64_t tag, const Tensor& out,
                                                  std::span<const int64_t> out_counts, const Tensor& in,
                                                  std::span<const int64_t> in_counts) override {
    Tensor h_in = stage_in(in), h_out = host_like(out);
    return wrap(host_.start_all_to_all_v(g, tag, h_out, out_counts, h_in, in_counts), h_out, out, h_in);
  }
  bool wait_any(std::span<const std::shared_ptr<CommRequest>> requests, double timeout_s) override {
    std::vector<std::shared_ptr<CommRequest>> inner;
    for (const auto& r : requests) {
      const auto* s = dynamic_cast<const StagingRequest*>(r.get());
      inner.push_back(s ? s->inner() : r);
    }
    return host_.wait_any(inner, timeout_s);
  }
  void abort(const std::string& message) override { host_.abort(message); }

 private:
  Tensor host_like(const Tensor& t) { return cpu_->empty(host_dtype(t.dtype()), t.shape()); }

  // A host copy of a device tensor (synchronizes the device stream).
  Tensor stage_in(const Tensor& t) {
    if (!t.defined()) throw Error("staging communicator: a tensor is undefined");
    Tensor h = host_like(t);
    if (t.dtype() == DType::i32)
      cpu_->upload_ids(cpu_->default_stream(), h, device_.download_ids(stream_, t));
    else
      cpu_->upload_values(cpu_->default_stream(), h, device_.download_values(stream_, t));
    return h;
  }
  void stage_out(const Tensor& h, const Tensor& t) {
    if (t.dtype() == DType::i32)
      device_.upload_ids(stream_, t, cpu_->download_ids(cpu_->default_stream(), h));
    else
      device_.upload_values(stream_, t, cpu_->download_values(cpu_->default_stream(), h));
  }
  // The request, copying `result` back into `target` on completion and keeping `keep` (an
  // input the host operation reads) alive until then.
  std::shared_ptr<CommRequest> wrap(std::shared_ptr<CommRequest> inner, Tensor result, Tensor target,
                                    Tensor keep = Tensor()) {
    std::function<void()> back = [this, result, target, keep] {
      if (result.defined()) stage_out(result, target);
    };
    return std::make_shared<StagingRequest>(std::move(inner), std::move(back));
  }

  Communicator& host_;
  Backend& device_;
  std::unique_ptr<Backend> cpu_;
  Stream& stream_;
};

}  // namespace

std::unique_ptr<Communicator> make_staging_communicator(Communicator& host, Backend& device) {
  if (device.allocate(0)->host_accessible()) return nullptr;  // a 0-byte probe: no accounting
  return std::make_unique<StagingCommunicator>(host, device);
}

}  // namespace trainplan::executor
