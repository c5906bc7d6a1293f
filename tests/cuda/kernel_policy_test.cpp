// The kernel policy (kernels/common/kernel_policy.h): chosen from the device and the `kernels` setting, GPUs
// below sm_80 refused with one line, launches held to the device's (or a narrower) shared-memory limit, and
// the portable kernels' shared memory per block against the 99 KiB of sm_86 / sm_89 / sm_120.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "attention/attention.cuh"
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernel_policy_select.h"
#include "backend_harness.h"
#include "core/error.h"
#include "gdn/gdn.cuh"

namespace deltatune::test {
namespace {

using kernels::KernelPolicy;
using kernels::kPortableSmemPerBlock;

cudaDeviceProp fake_device(const char* name, int major, int minor) {
  cudaDeviceProp p{};
  std::strncpy(p.name, name, sizeof(p.name) - 1);
  p.major = major, p.minor = minor;
  p.multiProcessorCount = 84;
  p.sharedMemPerBlockOptin = 101376;
  return p;
}

std::string error_of(const cudaDeviceProp& p, const std::string& kernels) {
  try {
    cuda::choose_kernel_policy(p, kernels);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(KernelPolicy, ChosenFromTheDeviceAndTheSetting) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  int optin = 0, sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  const KernelPolicy a = cuda::choose_kernel_policy(prop, "auto"),
                     p = cuda::choose_kernel_policy(prop, "portable");
  EXPECT_EQ(a.smem_optin, size_t(optin));
  EXPECT_EQ(a.sm_count, sms);
  EXPECT_EQ(a.cc_major, prop.major);
  EXPECT_EQ(a.hopper(), prop.major == 9 && prop.minor == 0 && kernels::kernels_built_for_hopper());
  EXPECT_FALSE(p.hopper());
  EXPECT_EQ(p.smem_optin, size_t(optin));
  cuda::CudaBackend be(0, DType::BF16, "portable");
  EXPECT_FALSE(be.kernel_policy().hopper());
  cuda::CudaBackend narrowed(0, DType::BF16,
                             KernelPolicy{kernels::KernelPath::Hopper, 9, 0, 1 << 20, 1 << 30});
  EXPECT_EQ(narrowed.kernel_policy().hopper(), a.hopper()) << "a narrowing policy never widens the path";
  EXPECT_EQ(narrowed.kernel_policy().smem_optin, size_t(optin));
  EXPECT_EQ(narrowed.kernel_policy().sm_count, sms);
}

TEST(KernelPolicy, OldGpusAndUnknownSettingsGetOneLine) {
  const std::string e = error_of(fake_device("Tesla T4", 7, 5), "auto");
  EXPECT_NE(e.find("Tesla T4"), std::string::npos) << e;
  EXPECT_NE(e.find("compute capability 7.5"), std::string::npos) << e;
  EXPECT_NE(e.find("8.0 or newer"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  const std::string k = error_of(fake_device("NVIDIA GeForce RTX 4090", 8, 9), "fast");
  EXPECT_NE(k.find("kernels: 'fast' is not valid (expected one of auto, portable)"), std::string::npos) << k;
  const KernelPolicy ada = cuda::choose_kernel_policy(fake_device("NVIDIA GeForce RTX 4090", 8, 9), "auto");
  EXPECT_FALSE(ada.hopper());
  EXPECT_EQ(ada.smem_optin, 101376u);
  EXPECT_EQ(ada.sm_count, 84);
}

TEST(KernelPolicy, DescribesEachDevice) {
  GpuDevice ada;
  ada.name = "NVIDIA RTX 6000 Ada Generation", ada.cc_major = 8, ada.cc_minor = 9;
  cuda::describe_cuda_device(ada, "auto");
  EXPECT_TRUE(ada.supported);
  EXPECT_EQ(ada.arch, "sm_89");
  EXPECT_EQ(ada.kernel_path, "portable");
  EXPECT_EQ(ada.problem, "");
  GpuDevice hopper;
  hopper.name = "NVIDIA H100 80GB HBM3", hopper.cc_major = 9, hopper.cc_minor = 0;
  cuda::describe_cuda_device(hopper, "auto");
  EXPECT_EQ(hopper.kernel_path, kernels::kernels_built_for_hopper() ? "hopper" : "portable");
  cuda::describe_cuda_device(hopper, "portable");
  EXPECT_EQ(hopper.kernel_path, "portable");
  GpuDevice volta;
  volta.name = "Tesla V100-SXM2-16GB", volta.cc_major = 7, volta.cc_minor = 0;
  cuda::describe_cuda_device(volta, "auto");
  EXPECT_FALSE(volta.supported);
  EXPECT_EQ(volta.kernel_path, "");
  EXPECT_NE(volta.problem.find("Tesla V100-SXM2-16GB has compute capability 7.0"), std::string::npos)
      << volta.problem;
}

// A launcher asked for more shared memory than the policy allows refuses before launching anything
// (cudaErrorInvalidConfiguration; the pointers are never read), and an op whose kernels do not fit a device's
// limit takes its fallback: here the GDN core under a 48 KiB limit runs the per-token kernels instead of the
// chunked ones and gives the same output as under the device's own policy.
TEST(KernelPolicy, LaunchesStayWithinTheLimit) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  KernelPolicy tiny;
  tiny.sm_count = 132;
  tiny.smem_optin = 16 * 1024;
  EXPECT_EQ(kernels::launch_gdn_chunk_scan_mma(tiny, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                               nullptr, 1, kernels::KOut{}, nullptr, nullptr, 1, 1, 128, 128,
                                               nullptr),
            cudaErrorInvalidConfiguration);
  KernelPolicy limit;
  limit.path = kernels::KernelPath::Portable;
  limit.sm_count = 1 << 20;
  limit.smem_optin = 48 * 1024;
  cuda::CudaBackend small(0, DType::BF16, limit), full(0, DType::BF16, "auto");
  Env e;
  const int64_t T = 200, HK = 1, HV = 2, D = 128;
  const Tensor hq = e.host_rand({T, HK, D}, DType::BF16, -1, 1), hk = e.host_rand({T, HK, D}, DType::BF16, -1, 1);
  const Tensor hv = e.host_rand({T, HV, D}, DType::BF16, -1, 1), hg = e.host_rand({T, HV}, DType::F32, -1, 0);
  const Tensor hb = e.host_rand({T, HV}, DType::BF16, 0.1f, 1);
  std::vector<float> out[2];
  int i = 0;
  for (cuda::CudaBackend* be : {&small, &full}) {
    Tensor q = be->upload(hq, DType::BF16), k = be->upload(hk, DType::BF16), v = be->upload(hv, DType::BF16);
    Tensor g = be->upload(hg, DType::F32), beta = be->upload(hb, DType::BF16);
    Tensor o = be->alloc({T, HV, D}, DType::BF16);
    const SeqLayout seq = e.layout(*be, {0, 77, int32_t(T)});
    ASSERT_NO_THROW(be->gdn_fwd(q, k, v, g, beta, seq, 0.088f, o)) << (i ? "device policy" : "48 KiB limit");
    const Tensor h = be->download(o, DType::F32);
    out[i++].assign(h.ptr<float>(), h.ptr<float>() + h.numel());
  }
  double d2 = 0, r2 = 0;
  for (size_t j = 0; j < out[1].size(); ++j) {
    d2 += (out[0][j] - out[1][j]) * double(out[0][j] - out[1][j]);
    r2 += out[1][j] * double(out[1][j]);
  }
  EXPECT_LE(std::sqrt(d2 / r2), 1e-2) << "per-token vs chunked GDN forward";
}

// Every portable kernel at most 99 KiB of shared memory per block (the opt-in limit of sm_86, sm_89 and
// sm_120), so the portable path runs on every supported GPU with its tensor-core kernels. Prints each kernel
// against the limit.
struct SmemOf {
  std::string name;
  size_t bytes;
};
void expect_within_99_kib(const std::vector<SmemOf>& ks) {
  for (const SmemOf& k : ks) {
    std::printf("  %-40s %7zu B (%.1f KiB)\n", k.name.c_str(), k.bytes, k.bytes / 1024.0);
    EXPECT_LE(k.bytes, kPortableSmemPerBlock) << k.name;
  }
}

// Attention: the tensor-core forward and backward (the dK/dV kernel walks 16-row query steps at hd 256 under
// the portable policy) and the FMA fallback at every head dim it takes.
TEST(KernelPolicy, PortableAttentionKernelsFitNinetyNineKiB) {
  const KernelPolicy portable;  // KernelPath::Portable
  std::vector<SmemOf> ks;
  for (int hd : {64, 128, 256}) {
    ks.push_back({"attention fwd mma hd " + std::to_string(hd), kernels::attention_fwd_mma_smem(portable, hd)});
    ks.push_back({"attention bwd mma hd " + std::to_string(hd), kernels::attention_bwd_mma_smem(portable, hd)});
    ks.push_back({"attention fwd fma hd " + std::to_string(hd), kernels::attention_fwd_smem(hd)});
    ks.push_back({"attention bwd fma hd " + std::to_string(hd), kernels::attention_bwd_smem(hd)});
  }
  expect_within_99_kib(ks);
}

// Every GDN kernel the portable policy may launch for the model's head dims (dk = dv = 128): the forward prep
// (bf16 inputs, and fp32 inputs with the K̂ lo tile), the forward scan variants it picks (BV 16/32 without
// prefetch, each printed, and the largest any of them may ask for), the reverse scan at every column tile with
// its one set of chunk operands, the state/intra backward (two value-column halves), the WY backward, the
// backward's lean prep and the odd-states kernel, and the per-token kernels (the last fallback). The fp32 FMA
// chunk kernels are left out: they run only for other head dims (gdn_chunk_mma_fits), where the dispatch
// checks their tiles against the device.
TEST(KernelPolicy, PortableGdnKernelsFitNinetyNineKiB) {
  const KernelPolicy portable;  // KernelPath::Portable
  std::vector<SmemOf> ks;
  ks.push_back({"gdn prep mma, bf16 inputs", kernels::gdn_chunk_prep_mma_raw_smem()});
  ks.push_back({"gdn prep mma, fp32 inputs (K-hat lo)", kernels::gdn_chunk_prep_mma_smem(128, 128)});
  for (int bv : {16, 32})
    for (bool o : {false, true})
      for (bool b16 : {false, true})
        ks.push_back({"gdn scan mma bv " + std::to_string(bv) + (o ? " o" : "") + (b16 ? " b16" : ""),
                      kernels::gdn_chunk_scan_mma_smem(bv, false, o, b16)});
  ks.push_back({"gdn scan mma, portable policy's largest", kernels::gdn_chunk_scan_mma_smem_max(portable)});
  ASSERT_TRUE(kernels::gdn_dscan_mma_one_set(portable));
  for (int bv : {16, 32, 64})
    ks.push_back({"gdn dscan mma bv " + std::to_string(bv) + " one set",
                  kernels::gdn_chunk_dscan_mma_smem(128, 128, bv, true)});
  ks.push_back({"gdn state/intra mma, bf16 q, k", kernels::gdn_chunk_grad_mma_smem(true)});
  ks.push_back({"gdn state/intra mma, fp32 q, k", kernels::gdn_chunk_grad_mma_smem(false)});
  ks.push_back({"gdn wy grad mma", kernels::gdn_wy_grad_mma_smem()});
  ks.push_back({"gdn lean prep mma", kernels::gdn_lean_prep_mma_smem()});
  ks.push_back({"gdn odd states mma", kernels::gdn_odd_states_mma_smem()});
  ks.push_back({"gdn core fwd (per token)", kernels::gdn_core_fwd_smem(128, 128)});
  ks.push_back({"gdn core bwd (per token)", kernels::gdn_core_bwd_smem(128, 128)});
  ks.push_back({"gdn tensor-core path, the most of any", kernels::gdn_chunk_mma_smem_needed(portable)});
  expect_within_99_kib(ks);
}

// A device with 99 KiB per block (an RTX 4090's limit, simulated by narrowing the H200's) runs the chunked
// tensor-core GDN path: the dispatch picks it, every launch stays within 99 KiB (a kernel asking for more is
// refused: set_launch_smem), and forward and backward give the same bits as the portable policy with the
// device's own limit.
TEST(KernelPolicy, NinetyNineKiBDeviceRunsChunkedGdn) {
  KernelPolicy ada{kernels::KernelPath::Portable, 8, 9, 1 << 20, kPortableSmemPerBlock};
  EXPECT_TRUE(kernels::gdn_chunk_mma_fits(ada, 128, 128));
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  cuda::CudaBackend small(0, DType::BF16, ada), full(0, DType::BF16, "portable");
  ASSERT_EQ(small.kernel_policy().smem_optin, kPortableSmemPerBlock);
  Env e;
  const int64_t T = 200, HK = 2, HV = 4, D = 128;
  const Tensor hq = e.host_rand({T, HK, D}, DType::BF16, -1, 1), hk = e.host_rand({T, HK, D}, DType::BF16, -1, 1);
  const Tensor hv = e.host_rand({T, HV, D}, DType::BF16, -1, 1), hg = e.host_rand({T, HV}, DType::F32, -1, 0);
  const Tensor hb = e.host_rand({T, HV}, DType::BF16, 0.1f, 1), hd = e.host_rand({T, HV, D}, DType::BF16, -1, 1);
  std::vector<std::vector<float>> out[2];
  int i = 0;
  for (cuda::CudaBackend* be : {&small, &full}) {
    Tensor q = be->upload(hq, DType::BF16), k = be->upload(hk, DType::BF16), v = be->upload(hv, DType::BF16);
    Tensor g = be->upload(hg, DType::F32), beta = be->upload(hb, DType::BF16), dout = be->upload(hd, DType::BF16);
    Tensor o = be->alloc({T, HV, D}, DType::BF16), dq = be->alloc({T, HK, D}, DType::BF16),
           dk = be->alloc({T, HK, D}, DType::BF16), dv = be->alloc({T, HV, D}, DType::BF16),
           dg = be->alloc({T, HV}, DType::F32), db = be->alloc({T, HV}, DType::BF16);
    const SeqLayout seq = e.layout(*be, {0, 77, int32_t(T)});
    const char* which = i ? "device limit" : "99 KiB";
    ASSERT_NO_THROW(be->gdn_fwd(q, k, v, g, beta, seq, 0.088f, o)) << which;
    ASSERT_NO_THROW(be->gdn_bwd(dout, q, k, v, g, beta, seq, 0.088f, dq, dk, dv, dg, db)) << which;
    auto keep = [&] {  // the model's pair: the forward keeps the chunk-start states (half of them, and V')
      auto saved = be->gdn_fwd_keep(q, k, v, g, beta, seq, 0.088f, o, Backend::GdnKeep::States);
      be->gdn_bwd_saved(saved.get(), dout, q, k, v, g, beta, seq, 0.088f, dq, dk, dv, dg, db);
    };
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1) ASSERT_NO_THROW(keep()) << which << ", keep states";
      for (const Tensor* t : {&o, &dq, &dk, &dv, &dg, &db}) {
        const Tensor h = be->download(*t, DType::F32);
        out[i].emplace_back(h.ptr<float>(), h.ptr<float>() + h.numel());
      }
    }
    ++i;
  }
  const char* names[] = {"o", "dq", "dk", "dv", "dg", "dbeta", "o (keep)", "dq (keep)", "dk (keep)",
                         "dv (keep)", "dg (keep)", "dbeta (keep)"};
  for (size_t j = 0; j < out[0].size(); ++j)
    EXPECT_EQ(out[0][j], out[1][j]) << names[j] << ": the 99 KiB device ran other kernels";
}

}  // namespace
}  // namespace deltatune::test
