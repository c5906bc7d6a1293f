#include "train/checkpoint_io.h"

#include "core/error.h"
#include "io/safetensors.h"
#include "lora/lora_b_layout.h"
#include "lora/peft_io.h"

namespace deltatune {
namespace {

const char* kMomentNames[4] = {"A.exp_avg", "A.exp_avg_sq", "B.exp_avg", "B.exp_avg_sq"};

}  // namespace

LoraAdapter lora_download(const LoraAdapter& adapter, Backend& be, bool with_moments) {
  LoraAdapter host = adapter;
  host.grad_flat = Tensor{};
  for (LoraModule& m : host.modules) m = lora_module_download(be, m, with_moments);
  return host;
}

std::string checkpoint_save(const std::string& output_dir, const TrainerState& st, const LoraAdapter& adapter,
                            Backend& be, const ModelConfig& cfg, const std::string& class_prefix,
                            const std::string& base_model, int64_t keep) {
  const LoraAdapter host = lora_download(adapter, be, true);
  return checkpoint_save_host(output_dir, st, host, cfg, class_prefix, base_model, keep);
}

std::string checkpoint_save_host(const std::string& output_dir, const TrainerState& st, const LoraAdapter& host,
                                 const ModelConfig& cfg, const std::string& class_prefix,
                                 const std::string& base_model, int64_t keep) {
  std::vector<std::pair<std::string, Tensor>> moments;
  for (const LoraModule& m : host.modules)
    for (int i = 0; i < 4; ++i) {
      if (m.moment(i).defined()) moments.emplace_back(m.path + "." + kMomentNames[i], m.moment(i));
    }
  return checkpoint_write(output_dir, st, moments,
                          [&](const std::string& dir) { peft_adapter_write(host, cfg, class_prefix, base_model, dir); },
                          keep);
}

namespace {

// The checkpoint's A, B and moments into `adapter`: put(dst, the file shape the run expects, saved host tensor,
// name, the module for a B-shaped tensor (B and its moments) else null).
template <class Put>
TrainerState restore_into(const std::string& dir, LoraAdapter& adapter, const ModelConfig& cfg, Put put) {
  const Checkpoint ck = checkpoint_load(dir);
  const LoraAdapter saved = peft_adapter_read(ck.adapter_dir(), cfg);
  check(saved.modules.size() == adapter.modules.size(),
        dir + ": the checkpoint adapts " + std::to_string(saved.modules.size()) + " modules, this run " +
            std::to_string(adapter.modules.size()) + " (were the LoRA targets changed?)");
  for (const LoraModule& s : saved.modules) {
    LoraModule* m = adapter.find(s.path);
    check(m != nullptr, dir + ": the checkpoint adapts " + s.path + ", which this run does not");
    // The file's shapes (PEFT's): B-shaped tensors go with their module, whose backend layout may differ.
    const Shape a_shape = m->A.shape, b_shape = lora_b_host_shape(*m);
    put(m->A, a_shape, s.A, s.path + ".lora_A", nullptr);
    put(m->B, b_shape, s.B, s.path + ".lora_B", m);
    for (int i = 0; i < 4; ++i) {
      const std::string name = s.path + "." + kMomentNames[i];
      if (!ck.optimizer || !ck.optimizer->has(name)) continue;
      put(m->moment(i), i < 2 ? a_shape : b_shape, ck.optimizer->get(name), name, i < 2 ? nullptr : m);
    }
  }
  return ck.state;
}

void check_shape(const Shape& want, const Tensor& host, const std::string& what) {
  check(host.shape == want, "checkpoint: " + what + " has shape " + shape_str(host.shape) + ", the run expects " +
                                shape_str(want));
}

}  // namespace

TrainerState checkpoint_restore(const std::string& dir, LoraAdapter& adapter, Backend& be, const ModelConfig& cfg) {
  return restore_into(dir, adapter, cfg,
                      [&](Tensor& dst, const Shape& want, const Tensor& host, const std::string& what,
                          const LoraModule* b_of) {
                        check_shape(want, host, what);
                        Tensor up = b_of ? lora_b_upload(be, *b_of, host) : be.upload(host, DType::F32);
                        if (!dst.defined()) dst = be.zeros(up.shape, DType::F32);
                        be.copy(dst, up);
                      });
}

TrainerState checkpoint_restore_host(const std::string& dir, LoraAdapter& host, const ModelConfig& cfg) {
  return restore_into(dir, host, cfg, [](Tensor& dst, const Shape& want, const Tensor& saved, const std::string& what,
                                         const LoraModule*) {  // the host keeps PEFT's layout
    check_shape(want, saved, what);
    dst = host_convert(saved, DType::F32);  // a copy: `saved` is memory-mapped or dropped after the restore
  });
}

}  // namespace deltatune
