"""DDP and FSDP2 with 2 processes (gloo, CPU): the same global batch, seed and recipe give the
1-process result when the recipe's scope is global -- layer 0's quantized operands and GEMM
output bit for bit at the first step, gradients and the loss curve to reduction-order noise
-- and a tensor amax is the global one (FSDP2's sharded weights included)."""

from __future__ import annotations

import socket

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import fp4spec  # noqa: E402
from fp4spec.training import get_recipe  # noqa: E402

from . import dist_worker  # noqa: E402

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")

CASES = (("ddp", "nvfp4", "global"), ("ddp", "ufp4", "global"), ("fsdp", "nvfp4", "global"),
         ("ddp", "nvfp4", "local"), ("ddp", "bf16", "global"))
ROWS = dist_worker.TOKENS // 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """One spawn of 2 processes runs every case (spawning costs seconds)."""
    out = tmp_path_factory.mktemp("dist")
    mp.spawn(dist_worker.worker, args=(2, CASES, _free_port(), str(out)), nprocs=2, join=True)
    return [torch.load(out / f"{r}.pt", weights_only=False) for r in range(2)]


@pytest.fixture(scope="module")
def one():
    return {name: dist_worker.train(get_recipe(name), "single") for name in ("nvfp4", "ufp4", "bf16")}


def _rel(a, b) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("case", [c for c in CASES if c[2] == "global"])
def test_two_processes_equal_one(two, one, case):
    ref = one[case[1]]
    for rank in range(2):
        res = two[rank][case]
        own = slice(rank * ROWS, (rank + 1) * ROWS)
        assert torch.equal(res["y0"], ref["y0"][own]), f"rank {rank}: layer 0's output differs"
        if case[1] != "bf16":
            assert torch.equal(res["x_values"], ref["x_values"][own])
            assert torch.equal(res["x_scale"], ref["x_scale"])  # the global batch's tensor amax
            assert torch.equal(res["w_values"], ref["w_values"])
            assert torch.equal(res["w_scale"], ref["w_scale"])  # FSDP2: the whole weight's, not the shard's
        # wgrad: two partial bf16 products summed by the all-reduce instead of one product
        assert _rel(res["grad0"], ref["grad0"]) < 1e-2
        assert res["losses"][0] == pytest.approx(ref["losses"][0], rel=1e-6)  # the mean of two means
        # later steps start from weights that differ by that noise; a 4-bit code can flip
        assert res["losses"] == pytest.approx(ref["losses"], rel=5e-3)


def test_a_shard_alone_has_another_tensor_scale():
    """Why the FSDP2 check above can fail: quantizing a weight shard gives another tensor scale."""
    w0 = dist_worker.build("bf16")[0].weight.detach()
    full = float(fp4spec.quantize(w0, "nvfp4_2d").global_scale)
    shards = [float(fp4spec.quantize(s, "nvfp4_2d").global_scale) for s in w0.chunk(2)]
    assert any(s != full for s in shards)


def test_local_scope_quantizes_per_rank(two, one):
    """scope='local' (TransformerEngine's data-parallel behaviour): the rank without the
    global amax element uses its own tensor scale, so its output differs from one process."""
    ref = one["nvfp4"]
    case = ("ddp", "nvfp4", "local")
    assert not torch.equal(two[0][case]["x_scale"], ref["x_scale"])  # rank 0 lacks the amax element
    assert not torch.equal(two[0][case]["y0"], ref["y0"][:ROWS])
    assert torch.equal(two[1][case]["x_scale"], ref["x_scale"])
    assert torch.equal(two[1][case]["y0"], ref["y0"][ROWS:])
