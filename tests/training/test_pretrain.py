"""The CPU smoke run of the pretraining comparison (tiny model, a few steps per recipe): the loss
decreases, quantization is really applied, a paused run resumes to the same result; the
offline corpus is deterministic."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fp4spec.training import corpus as corpus_mod  # noqa: E402
from fp4spec.training import pretrain  # noqa: E402

TINY = ["--d-model", "32", "--layers", "1", "--heads", "2", "--ffn", "64", "--seq-len", "32", "--batch", "4",
        "--log-every", "4", "--eval-every", "0", "--eval-tokens", "256", "--final-eval-tokens", "512",
        "--corpus-max-bytes", "300000", "--probe-tokens", "64", "--probe-rows", "32", "--lr", "1e-2",
        "--backend", "numpy"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("corpus"))


def _train(out, cache, *extra):
    return pretrain.main(["--out", str(out), "--cache-dir", cache, *TINY, *extra])


def _results(out):
    return json.loads((out / "results.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cache):
    base = tmp_path_factory.mktemp("runs")
    out = {}
    for recipe in ("bf16", "nvfp4", "ufp4"):
        assert _train(base / recipe, cache, "--recipe", recipe, "--steps", "8") == 0
        out[recipe] = base / recipe
    return out


@pytest.mark.parametrize("recipe", ["bf16", "nvfp4", "ufp4"])
def test_smoke_run_learns(runs, recipe):
    r = _results(runs[recipe])
    assert r["completed"] and r["steps"] == 8 and r["recipe"] == recipe
    losses = [t["train_loss"] for t in r["train_curve"]]
    assert losses[-1] < losses[0] < 6.0  # from about ln(256) = 5.5 down
    assert np.isfinite(r["final_val_loss"])
    assert len(r["corpus"]["manifest_sha256"]) == 64
    if recipe == "bf16":
        assert r["quantized_layers"] == [] and r["backends"] == {}
    else:
        assert r["quantized_layers"] == ["blocks.0.attn.out", "blocks.0.attn.qkv", "blocks.0.mlp.down",
                                         "blocks.0.mlp.gate_up"]  # lm_head stays in bf16
        every = {"fprop/x", "fprop/w", "dgrad/dy", "dgrad/w", "wgrad/dy", "wgrad/x"}
        # nvfp4's dgrad reuses fprop's 16x16-tile weight values: no second quantization
        assert set(r["backends"]) == (every - {"dgrad/w"} if recipe == "nvfp4" else every)


def test_recipes_change_the_numbers(runs):
    finals = {k: _results(v)["final_val_loss"] for k, v in runs.items()}
    assert len(set(finals.values())) == 3


def test_probes_cover_grids_gemms_and_rht(runs):
    recs = [json.loads(line) for line in (runs["nvfp4"] / "probes.jsonl").read_text().splitlines()]
    assert {r["step"] for r in recs} == {0, 8}
    assert {(r["gemm"], r["grid"], r["rht"]) for r in recs} == {
        (g, grid, rht) for g in ("fprop", "dgrad", "wgrad") for grid in ("e2m1", "e1m2") for rht in (0, 16)}
    assert all(0.5 < r["eta"] < 1.5 and 5 < r["sqnr_a"] < 40 for r in recs)


def test_gemm_inputs_are_on_the_grid(cache):
    """The model the script trains really multiplies 4-bit values: at most 8 magnitudes per
    block of 16 in every operand of every GEMM of every converted layer."""
    args = pretrain.build_parser().parse_args(["--out", "unused", "--recipe", "nvfp4", *TINY])
    d = pretrain.Dist()
    c = corpus_mod.load_corpus(None, cache_dir=cache, max_bytes=args.corpus_max_bytes)
    cfg = pretrain.GPTConfig(d_model=32, layers=1, heads=2, ffn=64, seq_len=32)
    model, net = pretrain.make_model(args, cfg, pretrain.get_recipe("nvfp4"), d)
    seen = []
    for layer in pretrain.quantized_layers(model).values():
        layer.on_operand = seen.append
    x, y = pretrain._local_batch(c.train, args, 0, 0, d, 4)
    net(x, y).backward()
    assert len(seen) == 4 * 5  # 4 layers, 6 operands, dgrad's weight reused from fprop
    for r in seen:
        v = r.values.float().movedim(r.axis, -1)
        v = v[..., : v.shape[-1] - v.shape[-1] % 16].reshape(-1, 16).abs()
        assert max(len(torch.unique(b)) for b in v) <= 8


def test_paused_run_resumes_to_the_same_result(tmp_path, runs, cache):
    out = tmp_path / "paused"
    assert _train(out, cache, "--recipe", "nvfp4", "--steps", "8", "--max-steps-this-call", "5") == pretrain.PAUSED
    part = _results(out)
    assert not part["completed"] and part["steps"] == 5
    assert _train(out, cache, "--recipe", "nvfp4", "--steps", "8") == 0
    whole, resumed = _results(runs["nvfp4"]), _results(out)
    assert resumed["completed"] and resumed["calls"] == 2
    assert resumed["final_val_loss"] == whole["final_val_loss"]
    a = torch.load(out / "checkpoint.pt", weights_only=False)
    b = torch.load(runs["nvfp4"] / "checkpoint.pt", weights_only=False)
    assert a["counters"] == b["counters"]
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in b["model"])  # the same weights, bit for bit
    with pytest.raises(ValueError, match="other arguments"):
        out2 = tmp_path / "paused2"
        _train(out2, cache, "--recipe", "nvfp4", "--steps", "8", "--max-steps-this-call", "2")
        _train(out2, cache, "--recipe", "nvfp4", "--steps", "8", "--seed", "3")


def test_default_corpus_is_deterministic(tmp_path):
    a = corpus_mod.load_corpus(None, cache_dir=tmp_path / "a", max_bytes=100_000)
    b = corpus_mod.load_corpus(None, cache_dir=tmp_path / "b", max_bytes=100_000)
    assert a.manifest_sha256 == b.manifest_sha256 and np.array_equal(a.train, b.train)
    manifest = next((tmp_path / "a").rglob("manifest.tsv")).read_text().splitlines()
    paths = [line.split("\t")[0] for line in manifest]
    assert paths[0].startswith("stdlib/") and paths == sorted(paths, key=lambda p: (not p.startswith("stdlib/"), p))
    assert a.train.size + a.val.size == 100_000 + a.files  # the bytes plus one separator per file


def test_data_directory_and_pretokenized(tmp_path):
    text = tmp_path / "text"
    (text / "sub").mkdir(parents=True)
    (text / "b.txt").write_text("second file " * 400)
    (text / "sub" / "a.md").write_text("first file " * 400)
    c = corpus_mod.load_corpus(text, cache_dir=tmp_path / "cache")
    assert c.files == 2 and c.vocab == 256
    ids = np.arange(10_000, dtype=np.int32) % 1000
    np.save(tmp_path / "ids.npy", ids)
    t = corpus_mod.load_corpus(tmp_path / "ids.npy")
    assert t.vocab == 1000 and t.train.size == 9900
    with pytest.raises(ValueError, match="data"):
        corpus_mod.load_corpus(tmp_path / "missing")


def test_batches_do_not_depend_on_the_process_count():
    starts = corpus_mod.batch_starts(10_000, 32, 8, seed=0, step=3)
    assert np.array_equal(starts, corpus_mod.batch_starts(10_000, 32, 8, seed=0, step=3))
    assert not np.array_equal(starts, corpus_mod.batch_starts(10_000, 32, 8, seed=0, step=4))


def test_summary_tabulates_gaps_and_plots(runs, tmp_path):
    from fp4spec.cli import main as cli
    from fp4spec.training import summary

    out = tmp_path / "summary"
    assert cli(["train-summary", str(runs["bf16"].parent), "--out", str(out)]) == 0
    rows = {r["recipe"]: r for r in json.loads((out / "summary.json").read_text())}
    assert set(rows) == {"bf16", "nvfp4", "ufp4"}
    assert rows["bf16"]["gap"] == 0.0
    want = _results(runs["nvfp4"])["final_val_loss"] - _results(runs["bf16"])["final_val_loss"]
    assert rows["nvfp4"]["gap"] == pytest.approx(want)
    text = (out / "summary.md").read_text()
    assert "| nvfp4 | 0 |" in text and "Mechanism on the tensors of the nvfp4 run" in text
    for png in ("loss_curves.png", "gaps.png", "mechanism_nvfp4.png"):
        assert (out / png).stat().st_size > 1000
    with pytest.raises(ValueError, match="paths"):
        summary.summarize([tmp_path / "nothing"], out)


def test_cli_train_help():
    from fp4spec.cli import main as cli

    with pytest.raises(SystemExit) as exc:
        cli(["train", "--help"])
    assert exc.value.code == 0
