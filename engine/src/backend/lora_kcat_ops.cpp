// lora_kcat_ops (backend/lora_kcat_ops.h).
#include "backend/lora_kcat_ops.h"

namespace deltatune {

LoraKcatOps* lora_kcat_ops(Backend& be) { return dynamic_cast<LoraKcatOps*>(&be); }

}  // namespace deltatune
