"""Offline, reproducible training data: byte-level tokens of text present wherever the package runs.

The default corpus (:func:`default_sources`) is the Python source installed with the running
interpreter, enumerated deterministically:

1. Roots, in this order: ``stdlib`` (``sysconfig.get_paths()["stdlib"]`` without its
   ``site-packages``/``dist-packages``), then ``site`` (``purelib``, then ``platlib`` if
   different).
2. Every ``*.py`` file below a root (``__pycache__`` skipped, symbolic links not followed),
   sorted by its path relative to the root (POSIX form); roots one after another.
3. Each file's bytes, followed by one 0x00 byte (the document separator), appended to the
   validation stream if its index in that order is a multiple of :data:`VAL_EVERY`, else to
   the training stream -- until ``max_bytes`` (if given) are taken.
4. The manifest: one line ``<root>/<path>\\t<size>\\t<sha256>`` per file taken; its SHA-256
   (``manifest_sha256``) names the corpus and is recorded with every result (it differs
   between machines with different packages installed).

``--data PATH`` takes any text files instead (a file, or a directory walked the same way,
every file whatever its suffix), or a pre-tokenized ``.npy`` array of integer token ids
(the last 1 % is the validation split). Nothing is downloaded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import sysconfig
from pathlib import Path

import numpy as np

#: Every VAL_EVERY-th file (in manifest order) is validation data.
VAL_EVERY = 50
SEPARATOR = b"\x00"
_SKIP_DIRS = {"__pycache__", "site-packages", "dist-packages"}


def default_sources() -> list[tuple[str, Path]]:
    """Step 1: the (label, root) pairs of the running interpreter's Python source."""
    paths = sysconfig.get_paths()
    roots = [("stdlib", Path(paths["stdlib"]))]
    site = []
    for key in ("purelib", "platlib"):
        p = Path(paths[key])
        if p not in site:
            site.append(p)
    roots += [("site" if i == 0 else f"site{i}", p) for i, p in enumerate(site)]
    return [(label, root) for label, root in roots if root.is_dir()]


def _walk(root: Path, suffix: str | None, skip_site: bool) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__" and not (skip_site and d in _SKIP_DIRS)]
        for f in filenames:
            if suffix is None or f.endswith(suffix):
                found.append(Path(dirpath, f).relative_to(root).as_posix())
    return sorted(found)


def enumerate_files(sources, suffix: str | None = ".py") -> list[tuple[str, Path, str]]:
    """Step 2: (label, absolute path, relative path) in corpus order."""
    out = []
    for label, root in sources:
        root = Path(root)
        if root.is_file():
            out.append((label, root, root.name))
            continue
        for rel in _walk(root, suffix, skip_site=(label == "stdlib")):
            out.append((label, root / rel, rel))
    return out


@dataclasses.dataclass(frozen=True)
class Corpus:
    """Token streams (numpy arrays, memory-mapped when cached) and their provenance."""

    train: np.ndarray
    val: np.ndarray
    vocab: int
    manifest_sha256: str
    files: int
    description: str

    def info(self) -> dict:
        return {"manifest_sha256": self.manifest_sha256, "files": self.files, "train_tokens": int(self.train.size),
                "val_tokens": int(self.val.size), "vocab": self.vocab, "description": self.description}


def build_byte_corpus(files, out_dir: Path, max_bytes: int | None = None) -> dict:
    """Steps 3-4: write ``train.bin``, ``val.bin`` (uint8) and ``manifest.tsv`` into out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    lines, taken, n_files = [], 0, 0
    tmp = f".{os.getpid()}.tmp"  # processes building the same corpus at once each write their own, then rename
    with open(out_dir / f"train.bin{tmp}", "wb") as tr, open(out_dir / f"val.bin{tmp}", "wb") as va:
        for i, (label, path, rel) in enumerate(files):
            if max_bytes is not None and taken >= max_bytes:
                break
            try:
                data = Path(path).read_bytes()
            except OSError:
                continue  # unreadable: left out, and so absent from the manifest
            if max_bytes is not None:
                data = data[: max_bytes - taken]
            (va if i % VAL_EVERY == 0 else tr).write(data + SEPARATOR)
            taken += len(data)
            n_files += 1
            lines.append(f"{label}/{rel}\t{len(data)}\t{hashlib.sha256(data).hexdigest()}")
    manifest = "\n".join(lines) + "\n"
    info = {"manifest_sha256": hashlib.sha256(manifest.encode()).hexdigest(), "files": n_files, "bytes": taken}
    (out_dir / f"manifest.tsv{tmp}").write_text(manifest)
    (out_dir / f"corpus.json{tmp}").write_text(json.dumps(info, indent=1))
    for name in ("train.bin", "val.bin", "manifest.tsv", "corpus.json"):  # corpus.json last: it marks completion
        os.replace(out_dir / f"{name}{tmp}", out_dir / name)
    return info


def _listing_key(files, max_bytes) -> str:
    h = hashlib.sha256(f"{max_bytes}\n".encode())
    for label, path, rel in files:
        try:
            size = os.stat(path).st_size
        except OSError:
            size = -1
        h.update(f"{label}/{rel}\t{size}\n".encode())
    return h.hexdigest()[:16]


def _load_bins(d: Path, description: str) -> Corpus:
    info = json.loads((d / "corpus.json").read_text())
    train = np.memmap(d / "train.bin", dtype=np.uint8, mode="r")
    val = np.memmap(d / "val.bin", dtype=np.uint8, mode="r")
    return Corpus(train, val, 256, info["manifest_sha256"], info["files"], description)


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fp4spec" / "corpus"


def load_corpus(data: "str | os.PathLike | None" = None, *, cache_dir=None, max_bytes: int | None = None) -> Corpus:
    """The corpus: ``data=None`` the default Python-source corpus; a ``.npy`` file of token ids;
    or a text file / directory of text files. Byte corpora are built once into ``cache_dir``
    (default ``~/.cache/fp4spec/corpus``), keyed by the file listing and sizes."""
    if max_bytes is not None and (isinstance(max_bytes, bool) or int(max_bytes) < 1):
        raise ValueError(f"max_bytes: {max_bytes!r} is not a positive integer")
    if data is not None and str(data).endswith(".npy"):
        tokens = np.load(data, mmap_mode="r")
        if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
            raise ValueError(f"data: {data} must hold a 1-d array of integer token ids, got {tokens.dtype} "
                             f"of shape {tokens.shape}")
        cut = int(tokens.size * 0.99)
        digest = hashlib.sha256(np.ascontiguousarray(tokens[: 1 << 20]).tobytes()).hexdigest()
        return Corpus(tokens[:cut], tokens[cut:], int(tokens.max()) + 1, digest, 1, f"pre-tokenized {data}")
    if data is None:
        files = enumerate_files(default_sources(), ".py")
        description = f"Python {sys.version.split()[0]} source (stdlib + site-packages), byte tokens"
    else:
        p = Path(data)
        if not p.exists():
            raise ValueError(f"data: {data} does not exist")
        files = enumerate_files([("data", p)], None)
        description = f"text files under {p}, byte tokens"
    if not files:
        raise ValueError(f"data: no files found under {data if data is not None else 'the Python installation'}")
    d = Path(cache_dir or default_cache_dir()) / _listing_key(files, max_bytes)
    if not (d / "corpus.json").exists():
        build_byte_corpus(files, d, max_bytes)
    corpus = _load_bins(d, description)
    if corpus.train.size < 2 or corpus.val.size < 2:
        raise ValueError(f"data: too little text ({corpus.train.size} training, {corpus.val.size} validation bytes)")
    return corpus


def batch_starts(n_tokens: int, seq_len: int, batch: int, seed: int, step: int) -> np.ndarray:
    """Window starts of global batch ``step``: ``default_rng([seed, step]).integers(0, n - seq_len - 1,
    batch)`` -- a function of (seed, step) alone, so resuming and process counts do not change it."""
    hi = n_tokens - seq_len - 1
    if hi < 1:
        raise ValueError(f"data: {n_tokens} tokens are too few for windows of {seq_len + 1}")
    return np.random.default_rng([int(seed), int(step)]).integers(0, hi, size=batch)


def windows(tokens: np.ndarray, starts: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and next-token targets, int64 arrays of shape (len(starts), seq_len)."""
    rows = np.stack([np.asarray(tokens[s: s + seq_len + 1], dtype=np.int64) for s in starts])
    return rows[:, :-1], rows[:, 1:]


__all__ = ["Corpus", "SEPARATOR", "VAL_EVERY", "batch_starts", "build_byte_corpus", "default_cache_dir",
           "default_sources", "enumerate_files", "load_corpus", "windows"]
