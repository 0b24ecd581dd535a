"""``fp4spec train``: pretrain a small Llama-style GPT with one recipe, resumable within a time budget.

One run = one recipe, one seed; every run with the same ``--data``, ``--data-seed`` and
schedule sees the same batches (a batch is a function of the data seed and the step alone:
:func:`fp4spec.training.corpus.batch_starts`), and ``--seed`` sets the initial weights and
the SR bits. A run writes into ``--out``:

* ``checkpoint.pt`` -- model, optimizer, step, SR counters, history; a later call with the
  same arguments resumes from it (``--time-budget`` stops a call in time and checkpoints:
  exit status 75 means "paused, run the same command again", 0 "completed");
* ``log.jsonl`` -- training loss, learning rate, tokens/s every ``--log-every`` steps, and the
  validation loss every ``--eval-every`` steps;
* ``probes.jsonl`` -- the mechanism metrics (:mod:`fp4spec.training.probes`) every
  ``--probe-every`` steps and at the end;
* ``results.json`` -- the summary (recipe table, final validation loss, curves, tokens/s,
  machine, versions, corpus manifest hash); ``fp4spec train-summary`` tabulates many.

Under ``torchrun`` (WORLD_SIZE > 1) it runs data-parallel with ``--parallel ddp`` (default)
or ``fsdp`` (FSDP2 ``fully_shard`` per block), NCCL on CUDA, gloo on the CPU; ``--batch`` is
the global batch, split evenly over the ranks.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

import fp4spec

from . import probes
from .corpus import batch_starts, load_corpus, windows
from .gpt import GPT, GPTConfig, parameter_count
from .linear import convert, counters, quantized_layers, set_counters
from .recipe import get_recipe, recipes

PAUSED = 75  # exit status of a call stopped by --time-budget (EX_TEMPFAIL)
#: Arguments that must not change between the calls of one run.
RUN_KEYS = ("recipe", "scope", "seed", "data", "data_seed", "corpus_max_bytes", "d_model", "layers", "heads", "ffn",
            "seq_len", "batch", "tokens", "steps", "lr", "warmup", "min_lr", "weight_decay", "skip")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fp4spec train", description=__doc__.split("\n")[0])
    a = p.add_argument
    a("--recipe", default="bf16", choices=list(recipes), help="the recipe preset")
    a("--scope", choices=["global", "local"], default=None, help="override the recipe's scope")
    a("--seed", type=int, default=0, help="initial weights and SR bits")
    a("--backend", default="auto", help="fp4spec.quantize backend for every operand (auto, triton, torch, numpy)")
    a("--out", required=True, help="the run's directory (checkpoint, logs, results.json)")
    a("--data", default=None, help="text file, directory of text files or .npy token ids (default: the "
                                   "installed Python source, byte tokens)")
    a("--data-seed", type=int, default=0, help="batch order (keep it equal across compared runs)")
    a("--corpus-max-bytes", type=int, default=None, help="cap the byte corpus")
    a("--cache-dir", default=None, help="where byte corpora are built (default ~/.cache/fp4spec/corpus)")
    a("--d-model", type=int, default=512)
    a("--layers", type=int, default=9)
    a("--heads", type=int, default=8)
    a("--ffn", type=int, default=1408)
    a("--seq-len", type=int, default=1024)
    a("--batch", type=int, default=64, help="global batch, in sequences")
    a("--tokens", type=float, default=300e6, help="training tokens (rounded up to whole steps)")
    a("--steps", type=int, default=None, help="training steps (overrides --tokens)")
    a("--lr", type=float, default=2e-3, help="peak learning rate (AdamW, betas 0.9/0.95)")
    a("--warmup", type=float, default=0.05, help="linear warmup, as a fraction of the steps")
    a("--min-lr", type=float, default=0.1, help="cosine decay to this fraction of the peak")
    a("--weight-decay", type=float, default=0.1)
    a("--skip", nargs="*", default=["lm_head"], help="fnmatch patterns of linears kept in bf16")
    a("--compile", action=argparse.BooleanOptionalAction, default=None, help="torch.compile (default: on CUDA)")
    a("--parallel", choices=["ddp", "fsdp"], default="ddp", help="under torchrun")
    a("--device", default=None, help="default: cuda if available, else cpu")
    a("--time-budget", type=float, default=None, help="seconds for this call; checkpoint and exit 75 before")
    a("--budget-reserve", type=float, default=30.0, help="seconds kept for checkpointing and the final eval")
    a("--max-steps-this-call", type=int, default=None, help="stop (and checkpoint) after this many steps")
    a("--log-every", type=int, default=20)
    a("--eval-every", type=int, default=200)
    a("--eval-tokens", type=int, default=262144)
    a("--final-eval-tokens", type=int, default=2097152)
    a("--probe-every", type=int, default=0, help="mechanism metrics every N steps (0: only at the end)")
    a("--probe-tokens", type=int, default=2048)
    a("--probe-rows", type=int, default=256)
    return p


@dataclasses.dataclass
class Dist:
    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")
    owns_group: bool = False

    def sum(self, t: torch.Tensor) -> torch.Tensor:
        if self.world > 1:
            torch.distributed.all_reduce(t)
        return t


def setup_distributed(device_arg) -> Dist:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    dev = device_arg or ("cuda" if torch.cuda.is_available() else "cpu")
    if world == 1 and not torch.distributed.is_initialized():
        return Dist(0, 1, torch.device(dev))
    owns = not torch.distributed.is_initialized()
    if dev.startswith("cuda"):
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        dev = f"cuda:{local}"
    if owns:
        torch.distributed.init_process_group("nccl" if dev.startswith("cuda") else "gloo")
    return Dist(torch.distributed.get_rank(), torch.distributed.get_world_size(), torch.device(dev), owns)


def lr_at(step: int, total: int, args) -> float:
    warm = max(1, int(round(args.warmup * total)))
    if step < warm:
        return args.lr * (step + 1) / warm
    frac = (step - warm) / max(1, total - warm)
    return args.lr * (args.min_lr + (1 - args.min_lr) * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def make_model(args, cfg: GPTConfig, recipe, d: Dist):
    """(the model, the module that runs steps: DDP/FSDP-wrapped and compiled as asked)."""
    torch.manual_seed(args.seed)
    model = GPT(cfg)  # initialised on the CPU: the same weights on every device
    convert(model, recipe, skip=tuple(args.skip))
    model.to(d.device)
    net = model
    if d.world > 1 and args.parallel == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
    elif d.world > 1:
        ids = [d.device.index] if d.device.type == "cuda" else None
        net = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
    use_compile = args.compile if args.compile is not None else d.device.type == "cuda"
    if use_compile:
        net = torch.compile(net)
    return model, net


def make_optimizer(model, args, device):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")


def _local_batch(tokens, args, step_seed, step, d: Dist, n: int):
    starts = batch_starts(tokens.size, args.seq_len, n, step_seed, step)
    own = starts.reshape(d.world, -1)[d.rank]
    x, y = windows(tokens, own, args.seq_len)
    to = dict(device=d.device, non_blocking=True)
    return torch.from_numpy(x).to(**to), torch.from_numpy(y).to(**to)


def _autocast(d: Dist):
    return torch.autocast(d.device.type, dtype=torch.bfloat16)


@torch.no_grad()
def evaluate(net, corpus, args, d: Dist, n_tokens: int) -> float:
    """Mean next-token loss over consecutive windows from the start of the validation stream."""
    per_rank = max(1, args.batch // d.world)
    seqs = max(1, n_tokens // (args.seq_len * per_rank * d.world)) * per_rank * d.world  # whole batches
    usable = (corpus.val.size - 1) // args.seq_len
    starts = [(i % usable) * args.seq_len for i in range(seqs)]
    mine = starts[d.rank::d.world]
    total = torch.zeros(2, dtype=torch.float64, device=d.device)
    for i in range(0, len(mine), per_rank):
        x, y = windows(corpus.val, mine[i: i + per_rank], args.seq_len)
        x, y = torch.from_numpy(x).to(d.device), torch.from_numpy(y).to(d.device)
        with _autocast(d):
            loss = net(x, y)
        total += torch.stack([loss.double() * x.numel(), torch.tensor(float(x.numel()), device=d.device,
                                                                      dtype=torch.float64)])
    d.sum(total)
    return float(total[0] / total[1])


def run_probe(model, corpus, args, d: Dist, step: int) -> list[dict]:
    """The mechanism metrics on this step's weights and a fixed batch (SR counters restored after)."""
    saved = counters(model)
    n = max(d.world, args.probe_tokens // args.seq_len)
    x, y = _local_batch(corpus.train, args, args.data_seed + 7919, 0, d, n - n % d.world)
    with _autocast(d):
        samples = probes.capture(model, lambda m: m(x, y), rows=args.probe_rows)
    set_counters(model, saved)
    model.zero_grad(set_to_none=True)
    return [dict(r, step=step) for r in probes.measure(samples, rows=args.probe_rows)]


def _state_dicts(model, opt, fsdp: bool):
    if not fsdp:
        return model.state_dict(), opt.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    return get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def _load_state_dicts(model, opt, msd, osd, fsdp: bool):
    if not fsdp:
        model.load_state_dict(msd)
        opt.load_state_dict(osd)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd,
                   options=StateDictOptions(full_state_dict=True))


def _watch_backends(model) -> dict:
    """Which backend quantized each (GEMM, tensor) on the first step: an ``auto`` fallback to the
    numpy emulator on a GPU would be slow, and should be seen."""
    seen: dict = {}
    for layer in quantized_layers(model).values():
        layer.on_operand = lambda r: seen.setdefault(f"{r.gemm}/{r.tensor}", set()).add(r.q.backend)
    return seen


def _unwatch(model) -> None:
    for layer in quantized_layers(model).values():
        layer.on_operand = None


def _append(path: Path, records) -> None:
    with open(path, "a") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


def _machine(d: Dist) -> dict:
    dev = torch.cuda.get_device_name(d.device) if d.device.type == "cuda" else platform.processor() or "cpu"
    return {"device": dev, "world": d.world, "host": platform.node(), "python": platform.python_version(),
            "torch": torch.__version__, "fp4spec": fp4spec.__version__}


def train(args) -> int:
    """One call of a run (module docstring); 0 when the run is complete, :data:`PAUSED` when stopped."""
    d = setup_distributed(args.device)
    try:
        return _train(args, d)
    finally:
        if d.owns_group:
            torch.distributed.destroy_process_group()


def _train(args, d: Dist) -> int:
    out = Path(args.out)
    lead = d.rank == 0
    if lead:
        out.mkdir(parents=True, exist_ok=True)
    run_key = {k: getattr(args, k) for k in RUN_KEYS}
    done = out / "results.json"
    if done.exists() and json.loads(done.read_text()).get("completed") and \
            json.loads(done.read_text()).get("run") == run_key:
        return 0
    t_call = time.perf_counter()
    recipe = get_recipe(args.recipe, seed=args.seed, backend=args.backend,
                        **({"scope": args.scope} if args.scope else {}))
    corpus = load_corpus(args.data, cache_dir=args.cache_dir, max_bytes=args.corpus_max_bytes)
    cfg = GPTConfig(vocab=corpus.vocab, d_model=args.d_model, layers=args.layers, heads=args.heads, ffn=args.ffn,
                    seq_len=args.seq_len)
    if args.batch % d.world:
        raise ValueError(f"batch: {args.batch} sequences do not split evenly over {d.world} processes")
    per_step = args.batch * args.seq_len
    total = args.steps if args.steps is not None else math.ceil(args.tokens / per_step)
    model, net = make_model(args, cfg, recipe, d)
    fsdp = d.world > 1 and args.parallel == "fsdp"
    opt = make_optimizer(model, args, d.device)
    hist = {"train": [], "val": [], "speed": [], "elapsed": 0.0, "calls": 0}
    step = 0
    ckpt = out / "checkpoint.pt"
    if ckpt.exists():
        state = torch.load(ckpt, map_location="cpu", weights_only=False)
        if state["run"] != run_key:
            raise ValueError(f"out: {out} holds a run with other arguments: "
                             f"{ {k: v for k, v in state['run'].items() if run_key.get(k) != v} }")
        _load_state_dicts(model, opt, state["model"], state["opt"], fsdp)
        set_counters(model, state["counters"])
        step, hist = state["step"], state["history"]
    hist["calls"] += 1
    probing = not fsdp  # FSDP2: capture's backward to the linears' outputs is not supported there
    if step == 0 and probing:
        recs = run_probe(model, corpus, args, d, 0)
        if lead:
            _append(out / "probes.jsonl", recs)
    backends = _watch_backends(model)
    interval_loss = torch.zeros((), device=d.device)
    interval_steps, t0, call_steps, step_times = 0, time.perf_counter(), 0, []
    paused = False
    while step < total:
        lr = lr_at(step, total, args)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = _local_batch(corpus.train, args, args.data_seed, step, d, args.batch)
        with _autocast(d):
            loss = net(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if call_steps == 0:
            _unwatch(model)
        interval_loss += loss.detach()
        interval_steps += 1
        step += 1
        call_steps += 1
        if step % args.log_every == 0 or step == total:
            mean = float(d.sum(interval_loss.clone()) / (interval_steps * d.world))  # syncs the device
            dt = time.perf_counter() - t0
            tps = interval_steps * per_step / dt
            step_times.append(dt / interval_steps)
            rec = {"step": step, "tokens": step * per_step, "train_loss": mean, "lr": lr, "tokens_per_s": tps}
            hist["train"].append(rec)
            if call_steps > interval_steps:  # the first interval of a call holds compilation
                hist["speed"].append(tps)
            if lead:
                _append(out / "log.jsonl", [rec])
                print(json.dumps(rec), flush=True)
            interval_loss.zero_()
            interval_steps, t0 = 0, time.perf_counter()
        if args.eval_every and step % args.eval_every == 0 and step < total:
            v = {"step": step, "tokens": step * per_step, "val_loss": evaluate(net, corpus, args, d, args.eval_tokens)}
            hist["val"].append(v)
            if lead:
                _append(out / "log.jsonl", [v])
        if probing and args.probe_every and step % args.probe_every == 0 and step < total:
            recs = run_probe(model, corpus, args, d, step)
            if lead:
                _append(out / "probes.jsonl", recs)
        elapsed = time.perf_counter() - t_call
        avg = statistics.median(step_times) if step_times else elapsed / call_steps
        over_budget = args.time_budget is not None and elapsed + 3 * avg + args.budget_reserve >= args.time_budget
        if step < total and (over_budget or (args.max_steps_this_call and call_steps >= args.max_steps_this_call)):
            paused = True
            break
    hist["elapsed"] += time.perf_counter() - t_call
    final = None
    if not paused:
        final = evaluate(net, corpus, args, d, args.final_eval_tokens)
        hist["val"].append({"step": step, "tokens": step * per_step, "val_loss": final})
        if probing:
            recs = run_probe(model, corpus, args, d, step)
            if lead:
                _append(out / "probes.jsonl", recs)
    msd, osd = _state_dicts(model, opt, fsdp)
    if lead:
        state = {"run": run_key, "model": msd, "opt": osd, "step": step, "counters": counters(model),
                 "history": hist}
        torch.save(state, out / "checkpoint.pt.tmp")
        os.replace(out / "checkpoint.pt.tmp", ckpt)
        results = {"run": run_key, "recipe": recipe.name, "recipe_table": recipe.table(), "scope": recipe.scope,
                   "seed": args.seed, "config": dataclasses.asdict(cfg), "params": parameter_count(model),
                   "quantized_layers": sorted(quantized_layers(model)), "steps": step, "total_steps": total,
                   "tokens": step * per_step, "completed": not paused, "final_val_loss": final,
                   "train_curve": hist["train"], "val_curve": hist["val"],
                   "tokens_per_s": statistics.median(hist["speed"]) if hist["speed"] else None,
                   "backends": {k: sorted(v) for k, v in backends.items()}, "elapsed_s": hist["elapsed"], "calls": hist["calls"], "parallel": args.parallel if d.world > 1
                   else None, "corpus": corpus.info(), "machine": _machine(d), "args": vars(args)}
        part = done.with_suffix(".json.part")  # other ranks may read it: they see the old file or the whole new one
        part.write_text(json.dumps(results, indent=1))
        os.replace(part, done)
        print(f"{'paused' if paused else 'completed'} at step {step}/{total}"
              + ("" if paused else f": final val loss {final:.4f}"), flush=True)
    return PAUSED if paused else 0


def main(argv=None) -> int:
    return train(build_parser().parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
