"""Tokenizers: train a byte-level BPE on the study's training split, or load a named one."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from pipeline.data.corpus import EXTRA_TOKENIZER_TEXTS
from pipeline.data.token_shards import id_dtype
from pipeline.io import atomic_path

if TYPE_CHECKING:
    import numpy as np

EOS = "<|endoftext|>"
PAD = "<|padding|>"


def train_bpe(texts: Iterable[str], vocab_size: int, min_frequency: int = 2) -> Tokenizer:
    """Byte-level BPE (GPT-2 style) with an end-of-text and a padding token."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def as_hf_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """Wrap a `tokenizer.json` as a transformers tokenizer with EOS doubling as BOS."""
    return PreTrainedTokenizerFast(tokenizer_file=str(path), bos_token=EOS, eos_token=EOS, pad_token=PAD)


def load_tokenizer(path_or_dir: str | Path) -> PreTrainedTokenizerFast:
    """A tokenizer from a model directory (save_pretrained layout) or a bare tokenizer.json."""
    from transformers import AutoTokenizer

    path = Path(path_or_dir)
    if path.is_file():
        return as_hf_tokenizer(path)
    tok = AutoTokenizer.from_pretrained(str(path))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def encode_documents(tokenizer: PreTrainedTokenizerFast, texts: list[str]) -> list[list[int]]:
    """Token ids of each document, no special tokens added (fast, batched in Rust)."""
    return tokenizer(texts, add_special_tokens=False)["input_ids"]


def token_stream(tokenizer: PreTrainedTokenizerFast, texts: list[str]) -> np.ndarray:
    """All documents as one token array, each document followed by the end-of-text token."""
    return pack_documents(encode_documents(tokenizer, texts), tokenizer.eos_token_id, len(tokenizer))


def pack_documents(ids: list[list[int]], eos: int, vocab_size: int) -> np.ndarray:
    """Documents' token ids as one array, each followed by `eos` (uint16 where the vocabulary fits)."""
    import numpy as np

    out = np.empty(sum(len(x) + 1 for x in ids), dtype=id_dtype(vocab_size))
    pos = 0
    for doc in ids:
        out[pos : pos + len(doc)] = doc
        out[pos + len(doc)] = eos
        pos += len(doc) + 1
    return out


def cached_token_stream(
    tokenizer: PreTrainedTokenizerFast, texts: list[str], cache_dir: str | Path | None
) -> np.ndarray:
    """token_stream, kept in `cache_dir` under a hash of the tokenizer and the texts: every
    fine-tuning job of a study reads the same task (the Python standard library: ~9 s to tokenize
    on one core), so the first one writes it and the others load it (None: no cache)."""
    import hashlib

    import numpy as np

    if cache_dir is None:
        return token_stream(tokenizer, texts)
    digest = hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode())
    for text in texts:
        digest.update(hashlib.sha256(text.encode()).digest())
    path = Path(cache_dir) / f"{digest.hexdigest()[:20]}.npy"
    if path.is_file():
        return np.load(path)
    tokens = token_stream(tokenizer, texts)
    with atomic_path(path) as tmp:
        np.save(tmp, tokens)
    return tokens


def study_tokenizer(train_texts: list[str], cfg: dict, task_texts: list[str] = ()) -> Tokenizer:
    """The `tokenizer:` config section: train a BPE (on `train_texts` plus extra texts) or load a file.

    task_texts: training-split texts of the fine-tuning tasks named in `extra_texts` (read
    from their task tables by the caller); other names there are EXTRA_TOKENIZER_TEXTS.
    """
    if cfg["kind"] == "file":
        return Tokenizer.from_file(cfg["path"])

    extra = []
    for name in cfg["extra_texts"]:
        if name in EXTRA_TOKENIZER_TEXTS:
            extra += [d.text for d in EXTRA_TOKENIZER_TEXTS[name]()]
    return train_bpe(train_texts + extra + list(task_texts), cfg["vocab_size"])
