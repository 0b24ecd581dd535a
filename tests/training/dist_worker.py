"""Workers of the 2-process tests (gloo, CPU): a tiny two-layer model trained for a few steps
on one global batch, alone (world 1, no process group), under DDP or under FSDP2."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from fp4spec.training import convert, get_recipe

STEPS = 3
TOKENS = 64  # global batch rows (tokens)
D_IN, D_HID = 32, 64


def global_batches():
    g = torch.Generator().manual_seed(1234)
    xs = [torch.randn(TOKENS, D_IN, generator=g) * torch.logspace(-1, 1, D_IN) for _ in range(STEPS)]
    xs[0][-1, 0] = 40.0  # the global amax of x at step 0 lies in the last rank's rows
    ys = [torch.randn(TOKENS, D_IN, generator=g) for _ in range(STEPS)]
    return xs, ys


def build(recipe):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(D_IN, D_HID, bias=False), torch.nn.GELU(),
                                torch.nn.Linear(D_HID, D_IN, bias=False))
    return convert(model, recipe)


def train(recipe, mode: str, rank: int = 0, world: int = 1, device: str = "cpu") -> dict:
    """Losses of every step (the global batch's mean), layer 0's step-0 output rows of this
    rank, and what layer 0's fprop quantized at step 0."""
    model = build(recipe).to(device)
    first = model[0]
    seen = {}

    def keep(record):
        if record.call == 0 and record.gemm == "fprop":
            seen[record.tensor] = (record.values.clone(), record.q.global_scale)

    first.on_operand = keep
    outputs = []
    hook = first.register_forward_hook(lambda m, i, o: outputs.append(o.detach().clone()))
    if mode == "ddp":
        ids = [torch.device(device).index] if device.startswith("cuda") else None
        net = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
    elif mode == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(torch.device(device).type, (world,))
        fully_shard(model[0], mesh=mesh)
        fully_shard(model[2], mesh=mesh)
        fully_shard(model, mesh=mesh)
        net = model
    else:
        net = model
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    xs, ys = global_batches()
    xs, ys = [x.to(device) for x in xs], [y.to(device) for y in ys]
    rows = TOKENS // world
    own = slice(rank * rows, (rank + 1) * rows)
    losses = []
    grad0 = None
    for x, y in zip(xs, ys):
        loss = torch.nn.functional.mse_loss(net(x[own]), y[own])
        loss.backward()
        if grad0 is None:
            g = model[0].weight.grad
            grad0 = (g.full_tensor() if hasattr(g, "full_tensor") else g).detach().clone()
        opt.step()
        opt.zero_grad(set_to_none=True)
        total = loss.detach().clone()
        if world > 1:
            dist.all_reduce(total)
        losses.append(float(total) / world)
    hook.remove()
    none = (None, None)
    seen = {k: tuple(None if t is None else t.cpu() for t in v) for k, v in seen.items()}
    outputs = [o.cpu() for o in outputs]
    grad0 = grad0.cpu()
    return {"losses": losses, "y0": outputs[0], "x_values": seen.get("x", none)[0], "x_scale": seen.get("x", none)[1],
            "w_values": seen.get("w", none)[0], "w_scale": seen.get("w", none)[1], "grad0": grad0}


def worker(rank: int, world: int, cases, trains, port: int, out_dir: str):
    """Run every (mode, recipe name, scope) of ``cases`` and every ``fp4spec train`` argument
    list of ``trains`` in one process group; save the results."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        results = {case: train(get_recipe(case[1], scope=case[2]), case[0], rank, world) for case in cases}
        torch.save(results, os.path.join(out_dir, f"{rank}.pt"))
        from fp4spec.training import pretrain

        for argv in trains:
            results[tuple(argv)] = pretrain.main(list(argv))
        torch.save(results, os.path.join(out_dir, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()


def gpu_worker(rank: int, world: int, cases, port: int, out_dir: str):
    """:func:`worker` on CUDA devices with NCCL (one GPU per process), cases only."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
        os.environ.setdefault(k, v)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device(f"cuda:{rank}"))
    try:
        results = {case: train(get_recipe(case[1], scope=case[2]), case[0], rank, world, f"cuda:{rank}")
                   for case in cases}
        torch.save(results, os.path.join(out_dir, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()
