// Expert LoRA B on the backend ([E, out, r]) vs the host (PEFT's [out, r·E]): lora/lora_b_layout.h at upload and
// download, a checkpoint's round trip (file layout unchanged, B and its moments back bit for bit) and expert
// parallel's slice (a rank's experts, contiguous on the backend). CPU backend; odd E, out and r.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>

#include "backend/backend.h"
#include "core/error.h"
#include "dist/expert_lora.h"
#include "io/safetensors.h"
#include "lora/lora.h"
#include "lora/lora_b_layout.h"
#include "train/checkpoint.h"
#include "train/checkpoint_io.h"
#include "tiny_model_config.h"

namespace deltatune {
namespace {

namespace fs = std::filesystem;

ModelConfig tiny_moe() { return testing_tiny::moe(20, 6, 7, 12, {LayerKind::LinearAttention, LayerKind::FullAttention}); }

Tensor random_host(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Tensor t = host_tensor(shape, DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = u(rng);
  return t;
}

// Expert LoRA (r 3) on both layers, every B random (lora_create's is zero), on the host.
LoraAdapter expert_adapter_host(uint32_t seed) {
  LoraSpec spec;
  spec.r = 3;
  spec.alpha = 6;
  spec.groups = {"experts"};
  LoraAdapter a = lora_create(tiny_moe(), spec, 11);
  for (LoraModule& m : a.modules) m.B = random_host(m.B.shape, seed++);
  return a;
}

// The same on a CPU backend.
LoraAdapter expert_adapter(Backend& be, uint32_t seed) {
  LoraAdapter a = expert_adapter_host(seed);
  lora_to_backend(a, be);
  return a;
}

TEST(LoraBLayout, ExpertBIsGroupedOnTheBackendAndPeftOnTheHost) {
  auto be = make_cpu_backend(1);
  LoraSpec spec;
  spec.r = 3;
  spec.groups = {"experts"};
  LoraAdapter a = lora_create(tiny_moe(), spec, 11);
  ASSERT_EQ(a.modules.size(), 4u);
  std::vector<Tensor> peft;
  for (LoraModule& m : a.modules) {
    m.B = random_host(m.B.shape, 5 + static_cast<uint32_t>(peft.size()));
    peft.push_back(m.B);
  }
  lora_to_backend(a, *be);
  for (size_t i = 0; i < a.modules.size(); ++i) {
    const LoraModule& m = a.modules[i];
    const int64_t E = m.experts, out = m.out, r = m.r;
    ASSERT_EQ(m.B.shape, (Shape{E, out, r})) << m.path;
    EXPECT_EQ(m.gB.shape, m.B.shape);
    EXPECT_EQ(lora_b_backend_shape(m), m.B.shape);
    const Tensor raw = be->download(m.B, DType::F32);
    for (int64_t e = 0; e < E; ++e)
      for (int64_t o = 0; o < out; ++o)
        for (int64_t k = 0; k < r; ++k)
          ASSERT_EQ(raw.ptr<float>()[(e * out + o) * r + k], peft[i].ptr<float>()[o * r * E + k * E + e])
              << m.path << " e " << e << " o " << o << " k " << k;
    EXPECT_EQ(host_to_f32(lora_b_download(*be, m, m.B)), host_to_f32(peft[i])) << m.path;
    EXPECT_EQ(lora_download(a, *be).modules[i].B.shape, (Shape{out, r * E}));
  }
  // A host tensor that is not PEFT's B of the module is refused, naming it.
  const LoraModule& m = a.modules[0];
  try {
    lora_b_upload(*be, m, host_tensor({m.experts, m.out, m.r}, DType::F32));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(m.path), std::string::npos) << e.what();
  }
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("dt_lora_b_layout_" + std::to_string(getpid()));
  TempDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

TEST(LoraBLayout, CheckpointKeepsPeftLayoutOnDiskAndRestoresExactly) {
  auto be = make_cpu_backend(1);
  LoraAdapter a = expert_adapter(*be, 21);
  uint32_t seed = 40;
  for (LoraModule& m : a.modules) {
    m.mA = be->upload(random_host(m.A.shape, seed++), DType::F32);
    m.vA = be->upload(random_host(m.A.shape, seed++), DType::F32);
    m.mB = lora_b_upload(*be, m, random_host({m.out, m.r * m.experts}, seed++));
    m.vB = lora_b_upload(*be, m, random_host({m.out, m.r * m.experts}, seed++));
  }
  TempDir tmp;
  TrainerState st;
  st.step = 3;
  const std::string dir =
      checkpoint_save((tmp.path / "out").string(), st, a, *be, tiny_moe(), "model.", "tiny", 2);

  // On disk: PEFT's [out, r·E] for B and its moments.
  const Checkpoint ck = checkpoint_load(dir);
  ASSERT_TRUE(ck.optimizer);
  for (const LoraModule& m : a.modules) {
    const Tensor f = ck.optimizer->get(m.path + ".B.exp_avg");
    EXPECT_EQ(f.shape, (Shape{m.out, m.r * m.experts})) << m.path;
    EXPECT_EQ(host_to_f32(f), host_to_f32(lora_b_download(*be, m, m.mB))) << m.path;
  }

  // Into a fresh adapter: B, A and the four moments come back bit for bit, in the backend's layout.
  LoraAdapter b = expert_adapter(*be, 90);
  const TrainerState got = checkpoint_restore(dir, b, *be, tiny_moe());
  EXPECT_EQ(got.step, 3);
  for (size_t i = 0; i < a.modules.size(); ++i) {
    const LoraModule &x = a.modules[i], &y = b.modules[i];
    ASSERT_EQ(y.B.shape, x.B.shape);
    for (auto t : {&LoraModule::A, &LoraModule::B, &LoraModule::mA, &LoraModule::vA, &LoraModule::mB,
                   &LoraModule::vB}) {
      ASSERT_TRUE((y.*t).defined()) << x.path;
      EXPECT_EQ((y.*t).shape, (x.*t).shape) << x.path;
      EXPECT_EQ(host_to_f32(be->download(y.*t, DType::F32)), host_to_f32(be->download(x.*t, DType::F32))) << x.path;
    }
  }
}

TEST(LoraBLayout, ExpertParallelSliceIsTheRanksExpertsOnTheBackend) {
  // Expert parallel slices on the host (expert_lora_keep_slice, PEFT's layout), then lora_to_backend uploads the
  // slice and its moments: rank k's backend B (and mB) are rows [2k, 2k + 2) of the full module's [E, out, r].
  auto be = make_cpu_backend(1);
  const LoraAdapter full = expert_adapter(*be, 60);
  for (int rank = 0; rank < 3; ++rank) {
    LoraAdapter a = expert_adapter_host(60);
    for (LoraModule& m : a.modules) m.mB = m.B;  // a moment with B's values: sliced and uploaded alike
    expert_lora_keep_slice(a, rank, 3);
    lora_to_backend(a, *be);
    for (size_t i = 0; i < a.modules.size(); ++i) {
      const LoraModule &s = a.modules[i], &f = full.modules[i];
      ASSERT_EQ(s.experts, 2);
      ASSERT_EQ(s.B.shape, (Shape{2, f.out, f.r}));
      EXPECT_EQ(s.gB.shape, s.B.shape);
      ASSERT_EQ(s.mB.shape, s.B.shape);
      const Tensor fb = be->download(f.B, DType::F32);
      const Tensor want = fb.slice(rank * 2, rank * 2 + 2);
      EXPECT_EQ(host_to_f32(be->download(s.B, DType::F32)), host_to_f32(want)) << s.path << " rank " << rank;
      EXPECT_EQ(host_to_f32(be->download(s.mB, DType::F32)), host_to_f32(want)) << s.path << " rank " << rank;
    }
  }
}

}  // namespace
}  // namespace deltatune
