"""GPU benchmark: one training step of the small Llama-style GPT per recipe, as a ratio to bf16.

The step is what ``fp4spec train`` runs: bf16 autocast, fp32 master weights, fused AdamW,
gradient clipping, torch.compile of the whole model with ``fullgraph=True`` (the quantized
linears are traced whole: quantize/dequantize custom operators, SR seeds and Philox bits in the
graph, the SR counters in tensors), the recipe's linears converted with
``fp4spec.training.convert`` (lm_head kept in bf16), the fast path (``compute="dequantize"``).
Per recipe it also records the graphs dynamo compiled in the warm-up and its graph breaks, and
over the timed rounds the graphs compiled (expected: 0 breaks, no graph after the warm-ups). Per recipe it reports the step time, tokens/s, the
ratio to bf16 (the median of per-round ratios over interleaved rounds), the backends that
quantized each operand, and the host synchronisations of one step
(``torch.cuda.set_sync_debug_mode("warn")``: each sync is a warning, counted by its source line).

    python benchmarks/bench_gpu_training_step.py [--recipes bf16,nvfp4,ufp4] [--layers 8] [--rounds 5]
        [--compute sm100-mxf4nvf4] [--mode reduce-overhead]

``--compute MODEL`` runs the quantized recipes' three GEMMs under an accumulator model instead
of the fast path ("train as Blackwell would round": on Hopper the certified GEMM of
``fp4spec.backends.triton.certify``); those layers run eagerly (graph breaks: the model is
compiled with ``fullgraph=False``), and the outputs the certificate hands to the CPU emulator
are counted per step (``HostFallbackWarning``).

Target (issue 20): nvfp4 and ufp4 steps <= 1.5x the bf16 step. With $OUT set, the table is also
written to $OUT/bench_gpu_training_step.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import time
import warnings

import torch

from fp4spec.training import convert, get_recipe, quantized_layers
from fp4spec.training.gpt import GPT, GPTConfig, parameter_count

T0 = time.time()


def log(msg):
    print(f"[{time.time() - T0:6.1f} s] {msg}", flush=True)


def with_compute(recipe, model):
    """``recipe`` with every GEMM whose operands are both quantized computed under ``model``."""
    import dataclasses

    if model is None or not recipe.quantized:
        return recipe
    gemms = {}
    for g in ("fprop", "dgrad", "wgrad"):
        gm = recipe.gemm(g)
        if gm.a.quantized and gm.b.quantized:
            gemms[g] = dataclasses.replace(gm, compute=model)
    return recipe.replace(**gemms)


FALLBACK = collections.Counter()


def count_fallbacks():
    """Count the outputs the certified GEMM hands to the CPU emulator (FALLBACK["outputs"])."""
    try:
        from fp4spec.backends.triton import certify
    except ImportError:
        return
    real = certify.fill_uncertified

    def counted(*args, **kw):
        n = real(*args, **kw)
        FALLBACK["outputs"] += n
        FALLBACK["calls"] += 1
        return n

    certify.fill_uncertified = counted


def build(recipe, cfg, args):
    torch.manual_seed(0)
    model = convert(GPT(cfg), recipe, skip=("lm_head",)).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), fused=args.device == "cuda")
    net = torch.compile(model, fullgraph=args.compute is None, mode=args.mode) if args.compile else model
    return model, net, opt


def step(model, net, opt, x, y):
    with torch.autocast(x.device.type, dtype=torch.bfloat16):
        loss = net(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def time_steps(run, x, y, n):
    if x.device.type != "cuda":  # a CPU dry run of the script
        t = time.perf_counter()
        for _ in range(n):
            step(*run, x, y)
        return (time.perf_counter() - t) / n
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        step(*run, x, y)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / n / 1e3


def sync_sites(run, x, y):
    """Host synchronisations of one step, counted by the warning's message and source line."""
    if x.device.type != "cuda":
        return {}
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step(*run, x, y)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    sites = collections.Counter(f"{os.path.relpath(w.filename)}:{w.lineno}" for w in caught
                                if "synchroniz" in str(w.message) and "is a prototype feature" not in str(w.message))
    return dict(sites)


def backends_used(model, x, y, run):
    """Which backend quantized each operand: one eager step with hooks (a hook runs the layer
    eagerly; the compiled graph, traced without hooks, is not touched)."""
    seen = collections.defaultdict(set)
    layers = quantized_layers(model).values()
    for layer in layers:
        layer.on_operand = lambda r: seen[f"{r.gemm}/{r.tensor}"].add(r.q.backend)
    _, _, opt = run
    step(model, model, opt, x, y)
    for layer in layers:
        layer.on_operand = None
    return {k: sorted(v) for k, v in seen.items()}


def dynamo_stats():
    """Graphs compiled (a recompilation is one more) and graph breaks since the last call (then cleared)."""
    c = torch._dynamo.utils.counters
    out = {"graphs": c["stats"].get("unique_graphs", 0), "graph_breaks": sum(c["graph_break"].values())}
    c.clear()
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--recipes", default="bf16,nvfp4,ufp4,mxfp4,ufp4_int4,nvfp4_full_rht")
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--ffn", type=int, default=1408)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=10, help="timed steps per recipe and round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--mode", default=None, help="torch.compile mode (e.g. reduce-overhead: CUDA graphs, the "
                                                "host's per-call time leaves the step)")
    p.add_argument("--device", default="cuda", help="cuda (the benchmark) or cpu (a dry run of the script)")
    p.add_argument("--compute", default=None, help="an accumulator model for the quantized GEMMs (default: the "
                   "fast path, dequantize + bf16 matmul)")
    args = p.parse_args()
    if args.compute:
        count_fallbacks()
    names = args.recipes.split(",")
    if names[0] != "bf16":
        names = ["bf16"] + [n for n in names if n != "bf16"]
    cfg = GPTConfig(d_model=args.d_model, layers=args.layers, ffn=args.ffn, seq_len=args.seq_len)
    dev_name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    log(f"{dev_name}, torch {torch.__version__}; GPT {parameter_count(GPT(cfg)) / 1e6:.1f}M "
        f"params, batch {args.batch} x {args.seq_len}")
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (args.batch, args.seq_len), generator=g).to(args.device)
    y = torch.randint(0, 256, (args.batch, args.seq_len), generator=g).to(args.device)
    runs, info = {}, {}
    for name in names:
        runs[name] = build(with_compute(get_recipe(name), args.compute), cfg, args)
        t = time.time()
        FALLBACK.clear()
        for _ in range(args.warmup):
            step(*runs[name], x, y)
        if args.device == "cuda":
            torch.cuda.synchronize()
        if args.compute:
            log(f"{name}: {FALLBACK['outputs'] / max(1, args.warmup):.0f} outputs per step to the CPU emulator "
                f"(uncertified), in {FALLBACK['calls']} of the warm-up's GEMMs")
        info[name] = {"warmup_s": time.time() - t, "backends": backends_used(runs[name][0], x, y, runs[name]),
                      "syncs": sync_sites(runs[name], x, y), "dynamo_warmup": dynamo_stats()}
        log(f"{name}: warm-up {info[name]['warmup_s']:.1f} s, dynamo {info[name]['dynamo_warmup']}; "
            f"syncs/step {sum(info[name]['syncs'].values())} "
            f"{info[name]['syncs']}; backends {info[name]['backends']}")
    times = collections.defaultdict(list)
    for r in range(args.rounds):
        for name in names:
            times[name].append(time_steps(runs[name], x, y, args.steps))
        log(f"round {r}: " + ", ".join(f"{n} {times[n][-1] * 1e3:.1f} ms" for n in names))
    timed = dynamo_stats()
    for name in names:
        info[name]["dynamo_timed"] = timed  # all recipes together: compiles during the timed rounds
    log(f"dynamo after the warm-ups: {timed}")
    tokens = args.batch * args.seq_len
    rows = []
    print("\n| recipe | step (ms, median) | tokens/s | step / bf16 (median of rounds) | syncs/step |")
    print("|---|---:|---:|---:|---:|")
    for name in names:
        ratio = statistics.median(a / b for a, b in zip(times[name], times["bf16"]))
        med = statistics.median(times[name])
        rows.append({"recipe": name, "step_s": med, "tokens_per_s": tokens / med, "ratio_to_bf16": ratio,
                     "rounds": times[name], **info[name]})
        print(f"| {name} | {med * 1e3:.1f} | {tokens / med / 1e6:.3f}M | {ratio:.2f}x | "
              f"{sum(info[name]['syncs'].values())} |")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "bench_gpu_training_step.json"), "w") as f:
            json.dump({"args": vars(args), "device": dev_name, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
