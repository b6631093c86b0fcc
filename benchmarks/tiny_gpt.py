"""A small GPT-2-style causal LM in plain torch (random weights, byte tokens), run directly.

    TinyGPT       token + position embeddings, pre-LayerNorm blocks (causal self-attention with
                  a key/value cache, GELU MLP), a final LayerNorm, the LM head tied to the
                  token embeddings: GPT-2's architecture at a size a CPU runs
    TinyLM        load a folder (config.json + model.safetensors), stream a prompt's
                  continuation as text deltas (`stream`), or as steps that carry each token's
                  log probability and the most likely tokens (`steps`, log_softmax of the
                  logits): bytes are tokens (vocabulary 256)
    make_weights  write a folder of random weights (seeded): no hub download
    __main__      the same model served straight by this script, for benchmarks/openai_ttft.py:
                  prints FIRST at the first token of the first generation, then one JSON line

The same file is copied next to the Thaw Python model (benchmarks/openai_ttft.py), so both
paths run the same code on the same weights.
"""

from __future__ import annotations

import argparse
import codecs
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Step", "TinyGPT", "TinyLM", "make_weights"]

VOCAB = 256  # a token is a byte of the UTF-8 text


class _Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.proj = nn.Linear(4 * width, width)

    def forward(
        self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(width, dim=-1)
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        if cache is not None:  # one new position attends to every cached one: no mask needed
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None)
        x = x + self.out(y.transpose(1, 2).reshape(batch, length, width))
        x = x + self.proj(F.gelu(self.fc(self.ln2(x))))
        return x, (k, v)


class TinyGPT(nn.Module):
    def __init__(self, *, layers: int, width: int, heads: int, context: int) -> None:
        super().__init__()
        self.context = context
        self.wte = nn.Embedding(VOCAB, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(_Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)

    def forward(
        self, ids: torch.Tensor, start: int, caches: list[tuple[torch.Tensor, torch.Tensor]] | None
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        positions = torch.arange(start, start + ids.shape[1])
        x = self.wte(ids) + self.wpe(positions)
        new = []
        for i, block in enumerate(self.blocks):
            x, cache = block(x, None if caches is None else caches[i])
            new.append(cache)
        logits = self.ln_f(x[:, -1]) @ self.wte.weight.T  # the head is tied to the embeddings
        return logits, new


class TinyLM:
    """A TinyGPT and how to stream text from it."""

    def __init__(self, model: TinyGPT) -> None:
        self.model = model.eval()

    @classmethod
    def load(cls, folder: Path | str) -> TinyLM:
        from safetensors.torch import load_file

        folder = Path(folder)
        config = json.loads((folder / "config.json").read_text())
        model = TinyGPT(**config)
        model.load_state_dict(load_file(folder / "model.safetensors"))
        return cls(model)

    def prompt_tokens(self, prompt: str) -> list[int]:
        return list(prompt.encode("utf-8"))

    def stream(
        self, prompt: str, *, max_tokens: int, temperature: float = 0.0, seed: int = 0
    ) -> Iterator[str]:
        """The continuation of `prompt`, one text delta per generated token (a delta is ''
        while a multi-byte character is incomplete)."""
        for step in self.steps(prompt, max_tokens=max_tokens, temperature=temperature, seed=seed):
            yield step.text

    @torch.inference_mode()
    def steps(
        self,
        prompt: str,
        *,
        max_tokens: int,
        temperature: float = 0.0,
        seed: int = 0,
        top: int = 0,
    ) -> Iterator[Step]:
        """The continuation of `prompt`, one Step per generated token, each with the `top`
        most likely tokens at its position. Log probabilities are the model's own (before
        temperature), as vLLM reports them."""
        room = self.model.context - max_tokens
        ids = self.prompt_tokens(prompt)[-max(room, 1) :] or [ord("\n")]
        generator = torch.Generator().manual_seed(seed)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        logits, caches = self.model(torch.tensor([ids]), 0, None)
        position = len(ids)
        for _ in range(max_tokens):
            if temperature > 0:
                probs = torch.softmax(logits[0] / temperature, dim=-1)
                token = int(torch.multinomial(probs, 1, generator=generator))
            else:
                token = int(logits[0].argmax())
            yield _step(decoder.decode(bytes([token])), token, logits[0], top)
            if position >= self.model.context:
                break
            logits, caches = self.model(torch.tensor([[token]]), position, caches)
            position += 1


class Step(NamedTuple):
    """One generated token (a NamedTuple, not a dataclass: the Python model loads this file
    without registering it as a module, which a dataclass needs)."""

    text: str  # the text it completes ('' while a multi-byte character is incomplete)
    token: int  # the byte
    logprob: float  # its log probability
    rank: int  # 1 for the most likely token
    top: tuple[tuple[int, float], ...]  # the most likely tokens (byte, log probability)


def _step(text: str, token: int, logits: torch.Tensor, top: int) -> Step:
    logprobs = F.log_softmax(logits.float(), dim=-1)
    rank = 1 + int((logprobs > logprobs[token]).sum())
    best = torch.topk(logprobs, top) if top else None
    ranked = (
        ()
        if best is None
        else tuple((int(i), float(v)) for v, i in zip(best.values, best.indices, strict=True))
    )
    return Step(text, token, float(logprobs[token]), rank, ranked)


def make_weights(
    folder: Path,
    *,
    layers: int = 6,
    width: int = 384,
    heads: int = 6,
    context: int = 1024,
    seed: int = 0,
) -> Path:
    """A folder with random weights for a TinyGPT of this size (seeded, GPT-2's init scale)."""
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    config = {"layers": layers, "width": width, "heads": heads, "context": context}
    model = TinyGPT(**config)
    for name, param in model.named_parameters():
        if param.dim() > 1:
            nn.init.normal_(param, std=0.02)
        elif name.endswith("bias"):
            nn.init.zeros_(param)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, folder / "model.safetensors")
    return folder


def main(argv: list[str] | None = None) -> int:
    """Serve the model straight: load, generate `--rounds` times, report each round."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--prompt", default="Once upon a time")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    lm = TinyLM.load(args.folder)
    rounds = []
    for r in range(args.rounds):
        start = time.perf_counter()
        stamps = []
        for _ in lm.stream(args.prompt, max_tokens=args.max_tokens):
            stamps.append(time.perf_counter())
            if r == 0 and len(stamps) == 1:
                print("FIRST", flush=True)
        rounds.append({"ttft_s": stamps[0] - start, "stamps": [s - start for s in stamps]})
    print(json.dumps({"rounds": rounds}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
