// Expert parallel's adapter on the host (dist/expert_lora.h): an expert module's slices join back into the same
// module, moments included, for every split; and the trainer's setup through two workers' host connections (each
// a thread of this test, on the CPU backend): rank 0's adapter scattered (each worker gets only its experts'
// slice, before anything is uploaded), put on the backend, broadcast, attached, and gathered back on rank 0 for a
// checkpoint gives rank 0's whole adapter bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <random>

#include "backend/backend.h"
#include "core/error.h"
#include "dist/data_parallel.h"
#include "dist/expert_lora.h"
#include "loopback_world.h"

namespace deltatune {
namespace {

Tensor random_host(Shape shape, std::mt19937& rng) {
  Tensor t = host_tensor(shape, DType::F32);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = u(rng);
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  return a.shape == b.shape && a.nbytes() == b.nbytes() && std::memcmp(a.data, b.data, a.nbytes()) == 0;
}

// E experts of rank r on in -> out, A [r·E, in], B [out, r·E]; moments when asked.
LoraModule expert_module(const std::string& path, int64_t E, int r, int64_t in, int64_t out, bool moments,
                         std::mt19937& rng) {
  LoraModule m;
  m.path = path;
  m.group = "experts";
  m.suffix = "experts.gate_up_proj";
  m.in = in, m.out = out, m.experts = E, m.r = r, m.scaling = 2.f;
  m.A = random_host({r * E, in}, rng);
  m.B = random_host({out, r * E}, rng);
  if (moments) {
    m.mA = random_host(m.A.shape, rng);
    m.vA = random_host(m.A.shape, rng);
    m.mB = random_host(m.B.shape, rng);
    m.vB = random_host(m.B.shape, rng);
  }
  return m;
}

void expect_same_module(const LoraModule& got, const LoraModule& want) {
  EXPECT_EQ(got.experts, want.experts) << want.path;
  EXPECT_TRUE(same_bytes(got.A, want.A)) << want.path;
  EXPECT_TRUE(same_bytes(got.B, want.B)) << want.path;
  EXPECT_TRUE(same_bytes(got.mA, want.mA)) << want.path;
  EXPECT_TRUE(same_bytes(got.vA, want.vA)) << want.path;
  EXPECT_TRUE(same_bytes(got.mB, want.mB)) << want.path;
  EXPECT_TRUE(same_bytes(got.vB, want.vB)) << want.path;
}

TEST(ExpertLora, SlicesJoinBackIntoTheWholeModuleMomentsIncluded) {
  std::mt19937 rng(5);
  for (const bool moments : {true, false}) {
    const LoraModule whole = expert_module("layers.0.mlp.experts.gate_up_proj", 8, 3, 5, 7, moments, rng);
    for (const int world : {1, 2, 4, 8}) {
      std::vector<LoraModule> slices;
      for (int rank = 0; rank < world; ++rank) slices.push_back(expert_lora_slice(whole, rank, world));
      const int64_t per = 8 / world;
      for (int rank = 0; rank < world; ++rank) {
        const LoraModule& s = slices[static_cast<size_t>(rank)];
        EXPECT_EQ(s.experts, per);
        EXPECT_EQ(s.A.shape, (Shape{3 * per, 5}));
        EXPECT_EQ(s.B.shape, (Shape{7, 3 * per}));
        EXPECT_EQ(s.mA.defined(), moments);
        // PEFT's layout: A row e·r + k, B column k·E + e of expert e (rank's experts first..first+per).
        const int64_t e = per - 1, k = 2, first = rank * per;
        EXPECT_EQ(s.A.ptr<float>()[(e * 3 + k) * 5 + 4], whole.A.ptr<float>()[((first + e) * 3 + k) * 5 + 4]);
        EXPECT_EQ(s.B.ptr<float>()[6 * 3 * per + k * per + e], whole.B.ptr<float>()[6 * 3 * 8 + k * 8 + first + e]);
        if (moments)
          EXPECT_EQ(s.vB.ptr<float>()[6 * 3 * per + k * per + e], whole.vB.ptr<float>()[6 * 3 * 8 + k * 8 + first + e]);
      }
      expect_same_module(expert_lora_join(slices), whole);
    }
  }
  EXPECT_THROW(expert_lora_slice(expert_module("x", 8, 2, 3, 3, false, rng), 0, 3), Error);
}

TEST(ExpertLora, KeepSliceReplacesTheExpertModulesOnly) {
  std::mt19937 rng(6);
  LoraAdapter a;
  LoraModule dense = expert_module("layers.0.self_attn.q_proj", 1, 2, 4, 4, true, rng);
  dense.experts = 0;
  a.modules = {dense, expert_module("layers.0.mlp.experts.down_proj", 4, 2, 3, 5, true, rng)};
  const LoraAdapter whole = a;
  expert_lora_keep_slice(a, 1, 2);
  expect_same_module(a.modules[0], whole.modules[0]);
  expect_same_module(a.modules[1], expert_lora_slice(whole.modules[1], 1, 2));
}

// A dense module and two expert modules; `seed` picks the values, `moments` whether the AdamW moments exist (a
// resumed run's rank 0).
LoraAdapter adapter_of(unsigned seed, bool moments) {
  std::mt19937 rng(seed);
  LoraAdapter a;
  LoraModule dense = expert_module("layers.0.self_attn.q_proj", 1, 2, 6, 6, moments, rng);
  dense.experts = 0;
  dense.group = "attn";
  a.modules = {dense, expert_module("layers.0.mlp.experts.gate_up_proj", 4, 2, 6, 10, moments, rng),
               expert_module("layers.0.mlp.experts.down_proj", 4, 2, 5, 6, moments, rng)};
  a.reindex();
  return a;
}

// The trainer's setup (train_run_setup.cpp restore_or_create_run) and checkpoint gather on two CPU workers.
void setup_and_gather(bool moments) {
  const int port = testing_loopback::free_port(), world = 2;
  const LoraAdapter whole = adapter_of(1, moments);  // rank 0's (created, or restored from a checkpoint)
  auto worker = [&](int rank) {
    DataParallel dp(testing_loopback::world(rank, world, port, 30, 30));
    auto be = make_cpu_backend(1);
    dp.connect_backend(*be);
    dp.token_exchange();  // expert parallel
    LoraAdapter a = rank == 0 ? whole : adapter_of(2, false);  // the others' own values never count
    dp.scatter_expert_lora(a);
    for (size_t m = 1; m < a.modules.size(); ++m)  // this worker's slice of rank 0's module, on the host
      expect_same_module(a.modules[m], expert_lora_slice(whole.modules[m], rank, world));
    lora_to_backend(a, *be);
    dp.broadcast_adapter(a);
    dp.attach(a, 1 << 20);
    EXPECT_TRUE(same_bytes(be->download(a.modules[0].A, DType::F32), whole.modules[0].A)) << rank;
    EXPECT_EQ(a.modules[1].gA.shape, a.modules[1].A.shape);
    const LoraAdapter joined = dp.gather_adapter_to_root(a);  // what a checkpoint and the export write
    if (rank != 0) return;
    ASSERT_EQ(joined.modules.size(), whole.modules.size());
    for (size_t m = 0; m < whole.modules.size(); ++m) expect_same_module(joined.modules[m], whole.modules[m]);
  };
  auto other = std::async(std::launch::async, worker, 1);
  worker(0);
  other.get();
}

TEST(ExpertLora, WorkersGetTheirSlicesAndRankZeroJoinsTheWholeAdapter) { setup_and_gather(false); }
TEST(ExpertLora, WorkersGetTheirSlicesAndRankZeroJoinsTheWholeAdapterResumed) { setup_and_gather(true); }

}  // namespace
}  // namespace deltatune
