#include "dist/data_parallel.h"

#include <array>
#include <cstring>
#include <span>

#include "core/error.h"
#include "dist/expert_exchange.h"
#include "dist/expert_lora.h"
#include "dist/shard_gatherers.h"
#include "lora/lora_b_layout.h"

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

// An expert slice on the host as bytes: A, B, then the four moments, each flagged ('\1' and its F32 bytes, or
// '\0' when not defined).
std::string slice_bytes(const LoraModule& host) {
  std::string bytes;
  for (const Tensor* t : {&host.A, &host.B, &host.mA, &host.vA, &host.mB, &host.vB}) {
    bytes.push_back(t->defined() ? 1 : 0);
    if (t->defined()) bytes.append(static_cast<const char*>(t->data), t->nbytes());
  }
  return bytes;
}

// slice_bytes back into `s` (F32 host tensors of A's and B's slice shapes; absent moments left empty).
void read_slice(LoraModule& s, const std::string& b, const Shape& a_shape, const Shape& b_shape) {
  size_t at = 0;
  auto get = [&](Tensor& t, const Shape& shape) {
    const bool has = b.at(at++) != 0;
    if (!has) {
      t = Tensor{};
      return;
    }
    t = host_tensor(shape, DType::F32);
    check(at + t.nbytes() <= b.size(), "internal: expert LoRA slice of " + s.path + " is short");
    std::memcpy(t.data, b.data() + at, t.nbytes());
    at += t.nbytes();
  };
  get(s.A, a_shape);
  get(s.B, b_shape);
  get(s.mA, a_shape);
  get(s.vA, a_shape);
  get(s.mB, b_shape);
  get(s.vB, b_shape);
  check(at == b.size(), "internal: expert LoRA slice of " + s.path + " is long");
}

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

TokenExchange& DataParallel::token_exchange() {
  check(be_ != nullptr, "internal: DataParallel::token_exchange before connect_backend");
  if (exchange_) return *exchange_;
  if (be_->device() == Device::CPU) {
    exchange_ = make_host_token_exchange(rv_);
    return *exchange_;
  }
  exchange_ = be_->create_token_exchange(comm_setup());
  check(exchange_ != nullptr, "backend " + be_->name() +
                                  " cannot exchange tokens between GPUs for expert parallel: this build of DeltaTune "
                                  "has no NCCL (configure with -DDT_NCCL=ON where NCCL is installed, or set "
                                  "weight_layout: replicated or sharded)");
  return *exchange_;
}

void DataParallel::attach(LoraAdapter& adapter, int64_t bucket_bytes) {
  check(be_ != nullptr, "internal: DataParallel::attach before connect_backend");
  std::vector<GradSlot> slots;
  own_grads_.clear();
  for (LoraModule& m : adapter.modules) {
    if (exchange_ && is_expert_lora(m)) {  // complete on this worker: not summed
      m.gA = be_->zeros(m.A.shape, DType::F32);
      m.gB = be_->zeros(m.B.shape, DType::F32);
      own_grads_.push_back(m.gA);
      own_grads_.push_back(m.gB);
      continue;
    }
    slots.push_back({m.layer, m.A.numel()});
    slots.push_back({m.layer, m.B.numel()});
  }
  const GradLayout layout = layout_gradients(slots, kAlign);
  flat_ = be_->zeros({std::max<int64_t>(layout.total, 1)}, DType::F32);
  size_t k = 0;
  for (LoraModule& m : adapter.modules) {
    if (exchange_ && is_expert_lora(m)) continue;
    const int64_t oa = layout.offset[k++], ob = layout.offset[k++];
    m.gA = flat_.slice(oa, oa + m.A.numel()).view(m.A.shape);
    m.gB = flat_.slice(ob, ob + m.B.numel()).view(m.B.shape);
  }
  buckets_ = plan_buckets(slots, layout, std::max<int64_t>(kAlign, bucket_bytes / 4));
  adapter.grad_flat = Tensor{};  // every gradient lives in flat_ now: lora_to_backend's buffer is freed
}

void DataParallel::zero_gradients() {
  be_->fill(flat_, 0.f);
  for (Tensor& g : own_grads_) be_->fill(g, 0.f);
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
    if (exchange_ && is_expert_lora(m)) continue;  // this worker's slice (scatter_expert_lora)
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

void DataParallel::scatter_expert_lora(LoraAdapter& host) {
  const int W = world();
  for (LoraModule& m : host.modules) {
    if (!is_expert_lora(m)) continue;
    check(m.A.device == Device::CPU && m.B.device == Device::CPU,
          "internal: scatter_expert_lora of " + m.path + " after lora_to_backend");
    check(m.experts % W == 0, "expert parallel: " + m.path + " has " + std::to_string(m.experts) +
                                  " experts, which do not divide over " + std::to_string(W) + " GPUs");
    std::vector<std::string> parts;
    if (root())
      for (int r = 0; r < W; ++r) parts.push_back(slice_bytes(expert_lora_slice(m, r, W)));
    const std::string mine = rv_.scatter(parts);
    const int64_t per = m.experts / W, rows = static_cast<int64_t>(m.r) * per;
    const Shape a_shape{rows, m.A.dim(1)}, b_shape{m.B.dim(0), rows};
    m.experts = per;
    m.Ac = m.Bc = m.gA = m.gB = Tensor{};
    read_slice(m, mine, a_shape, b_shape);
  }
}

double DataParallel::expert_parallel_grad_sq(LoraAdapter& adapter, double mine_sq) {
  std::vector<const Tensor*> experts;
  for (const LoraModule& m : adapter.modules)
    if (is_expert_lora(m)) {
      experts.push_back(&m.gA);
      experts.push_back(&m.gB);
    }
  const double expert_sq = experts.empty() ? 0.0 : be_->sum_squares_many(experts);
  // Rank 0 brings the non-expert part once (every worker holds the same summed copy) and its experts.
  std::array<double, 1> v{root() ? mine_sq : expert_sq};
  rv_.sum(v);
  return v[0];
}

LoraAdapter DataParallel::gather_adapter_to_root(const LoraAdapter& adapter) {
  LoraAdapter out = adapter;
  out.modules.clear();
  for (const LoraModule& m : adapter.modules) {
    LoraModule host = lora_module_download(*be_, m, true);  // PEFT's layout on the host, moments included
    if (!exchange_ || !is_expert_lora(m)) {
      if (root()) out.modules.push_back(std::move(host));
      continue;
    }
    // Each worker's slice as F32 bytes (slice_bytes), joined on rank 0.
    const std::vector<std::string> all = rv_.all_gather(slice_bytes(host));
    if (!root()) continue;
    std::vector<LoraModule> slices;
    for (const std::string& b : all) {
      LoraModule s = host;
      read_slice(s, b, host.A.shape, host.B.shape);
      slices.push_back(std::move(s));
    }
    out.modules.push_back(expert_lora_join(slices));
  }
  out.reindex();
  return out;
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
  if (exchange_) exchange_->abort();
}

}  // namespace deltatune
