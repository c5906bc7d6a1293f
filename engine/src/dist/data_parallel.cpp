#include "dist/data_parallel.h"

#include <cstring>
#include <span>

#include "core/error.h"
#include "dist/shard_gatherers.h"

namespace deltatune {
namespace {

constexpr int64_t kAlign = 64;  // elements: every gradient view starts 256-byte aligned

class HostReducer final : public GradientReducer {
 public:
  explicit HostReducer(Rendezvous& rv) : rv_(rv) {}
  void start_sum(Tensor& t) override {
    check(t.device == Device::CPU && t.dtype == DType::F32, "internal: host reducer: expects F32 host tensors");
    rv_.sum(std::span<float>(t.ptr<float>(), static_cast<size_t>(t.numel())));
  }
  void broadcast(Tensor& t) override {
    check(t.device == Device::CPU, "internal: host reducer: expects host tensors");
    const std::string bytes = rv_.broadcast(std::string(static_cast<const char*>(t.data), t.nbytes()));
    check(bytes.size() == t.nbytes(), "internal: host reducer: broadcast of another size");
    std::memcpy(t.data, bytes.data(), bytes.size());
  }
  void finish() override {}
  void abort() noexcept override {}

 private:
  Rendezvous& rv_;
};

}  // namespace

std::unique_ptr<GradientReducer> make_host_reducer(Rendezvous& rv) { return std::make_unique<HostReducer>(rv); }

DataParallel::DataParallel(const DistWorld& world) : rv_(world) {}

DataParallel::~DataParallel() = default;

ReducerSetup DataParallel::comm_setup() {
  ReducerSetup s;
  s.rank = rv_.rank();
  s.world = rv_.world();
  s.share_from_rank0 = [this](const std::string& bytes) { return rv_.broadcast(bytes); };
  s.peer_fault = [this] { return rv_.poll_fault(); };
  s.timeout_s = rv_.timeout_s();
  return s;
}

void DataParallel::connect_backend(Backend& be) {
  be_ = &be;
  if (be.device() == Device::CPU) {
    reducer_ = make_host_reducer(rv_);
    return;
  }
  reducer_ = be.create_gradient_reducer(comm_setup());
  check(reducer_ != nullptr, "backend " + be.name() +
                                 " cannot sum gradients across GPUs: this build of DeltaTune has no NCCL "
                                 "(configure with -DDT_NCCL=ON where NCCL is installed)");
  // Every worker agrees the communicator works before the first step depends on it.
  Tensor probe = be.zeros({1}, DType::F32);
  reducer_->start_sum(probe);
  reducer_->finish();
}

ShardGatherer& DataParallel::shard_gatherer() {
  check(be_ != nullptr, "internal: DataParallel::shard_gatherer before connect_backend");
  if (gatherer_) return *gatherer_;
  if (be_->device() == Device::CPU) {
    gatherer_ = make_host_shard_gatherer(rv_);
    return *gatherer_;
  }
  gatherer_ = be_->create_shard_gatherer(comm_setup());
  check(gatherer_ != nullptr, "backend " + be_->name() +
                                  " cannot gather sharded weights across GPUs: this build of DeltaTune has no NCCL "
                                  "(configure with -DDT_NCCL=ON where NCCL is installed, or set weight_layout: "
                                  "replicated)");
  return *gatherer_;
}

void DataParallel::attach(LoraAdapter& adapter, int64_t bucket_bytes) {
  check(be_ != nullptr, "internal: DataParallel::attach before connect_backend");
  std::vector<GradSlot> slots;
  for (const LoraModule& m : adapter.modules) {
    slots.push_back({m.layer, m.A.numel()});
    slots.push_back({m.layer, m.B.numel()});
  }
  const GradLayout layout = layout_gradients(slots, kAlign);
  flat_ = be_->zeros({std::max<int64_t>(layout.total, 1)}, DType::F32);
  size_t k = 0;
  for (LoraModule& m : adapter.modules) {
    const int64_t oa = layout.offset[k++], ob = layout.offset[k++];
    m.gA = flat_.slice(oa, oa + m.A.numel()).view(m.A.shape);
    m.gB = flat_.slice(ob, ob + m.B.numel()).view(m.B.shape);
  }
  buckets_ = plan_buckets(slots, layout, std::max<int64_t>(kAlign, bucket_bytes / 4));
}

void DataParallel::zero_gradients() {
  be_->fill(flat_, 0.f);
  next_bucket_ = 0;
}

void DataParallel::layer_done(int layer) {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].ready_after_layer >= layer) {
    Tensor part = flat_.slice(buckets_[next_bucket_].begin, buckets_[next_bucket_].end);
    reducer_->start_sum(part);
    ++next_bucket_;
  }
}

void DataParallel::finish_gradients() {
  layer_done(-1);
  reducer_->finish();
}

void DataParallel::broadcast_adapter(LoraAdapter& adapter) {
  // Which moments rank 0 holds (a resumed run has them, a new one not yet).
  const std::string has = rv_.broadcast(adapter.modules.empty() || !adapter.modules[0].mA.defined() ? "0" : "1");
  for (LoraModule& m : adapter.modules) {
    reducer_->broadcast(m.A);
    reducer_->broadcast(m.B);
    if (has == "1") {
      for (Tensor* t : {&m.mA, &m.vA, &m.mB, &m.vB}) {
        const Tensor& shape_of = (t == &m.mA || t == &m.vA) ? m.A : m.B;
        if (!t->defined()) *t = be_->zeros(shape_of.shape, DType::F32);
        reducer_->broadcast(*t);
      }
    }
  }
  reducer_->finish();
}

void DataParallel::sum_tensor(Tensor& t) {
  if (t.device == Device::CPU) {
    reducer_->start_sum(t);
    return;
  }
  Tensor h = be_->download(t, DType::F32);
  rv_.sum(std::span<float>(h.ptr<float>(), static_cast<size_t>(h.numel())));
  Tensor up = be_->upload(h, DType::F32);
  be_->copy(t, up);
}

void DataParallel::fail(const std::string& why) noexcept {
  rv_.announce_failure(why);
  if (reducer_) reducer_->abort();
  if (gatherer_) gatherer_->abort();
}

}  // namespace deltatune
