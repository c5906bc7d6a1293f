# Reference trajectory for tests/unit/cpu_backend_test.cpp (CpuOptim.AdamWMatchesTorchTrajectory).
# Run with a Python that has torch; prints the fp32 parameters after 5 torch.optim.AdamW steps.
import torch

p = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0], dtype=torch.float32))
opt = torch.optim.AdamW([p], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, foreach=False, fused=False)
for t in range(1, 6):
    p.grad = torch.tensor([0.1 * t, -0.2, 0.05 * (-1) ** t], dtype=torch.float32)
    opt.step()
print([repr(float(x)) for x in p.detach()])
