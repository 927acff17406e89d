"""Training steps of the overhead benchmarks (bench_workload.py, window_ab.py): each
function builds its model and data on `dev` and returns the step as a callable."""
import torch


def mlp(dev):
    """3 x Linear 4096 with ReLU, AdamW, batch 256."""
    m = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096),
                            torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    xb = torch.randn(256, 4096, device=dev)
    yb = torch.randn(256, 4096, device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(m(xb), yb).backward()
        opt.step()
    return step


def resnet50(dev):
    """torchvision ResNet-50, SGD with momentum, batch 64, bf16 autocast."""
    import torchvision
    r = torchvision.models.resnet50().to(dev)
    opt = torch.optim.SGD(r.parameters(), lr=0.01, momentum=0.9)
    xi = torch.randn(64, 3, 224, 224, device=dev)
    yi = torch.randint(0, 1000, (64,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(r(xi), yi)
        loss.backward()
        opt.step()
    return step
