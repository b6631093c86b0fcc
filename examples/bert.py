"""A small BERT-style encoder (embeddings, post-LN transformer layers, pooler) in plain torch."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["BertConfig", "BertEncoder", "bert_encoder"]


@dataclass(frozen=True)
class BertConfig:
    """Sizes of the encoder; `max_positions` bounds the sequence length it accepts."""

    vocab_size: int
    hidden: int = 128
    layers: int = 2
    heads: int = 2
    intermediate: int = 512
    max_positions: int = 128


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention with an additive padding mask."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.head_dim = cfg.hidden // cfg.heads
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.out = nn.Linear(cfg.hidden, cfg.hidden)

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        qkv = self.qkv(x).reshape(batch, seq, 3, self.heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each [B, heads, S, head_dim]
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim) + mask_bias
        context = torch.softmax(scores, dim=-1) @ v
        return self.out(context.transpose(1, 2).reshape(batch, seq, hidden))


class EncoderLayer(nn.Module):
    """Attention then a GELU feed-forward block, each followed by residual + LayerNorm."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.attention = SelfAttention(cfg)
        self.norm1 = nn.LayerNorm(cfg.hidden, eps=1e-12)
        self.ffn = nn.Sequential(
            nn.Linear(cfg.hidden, cfg.intermediate),
            nn.GELU(),
            nn.Linear(cfg.intermediate, cfg.hidden),
        )
        self.norm2 = nn.LayerNorm(cfg.hidden, eps=1e-12)

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attention(x, mask_bias))
        return self.norm2(x + self.ffn(x))


class BertEncoder(nn.Module):
    """(input_ids, attention_mask) INT64 [B, S] -> last_hidden_state [B, S, H], pooler [B, H]."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden, padding_idx=0)
        self.position_embeddings = nn.Embedding(cfg.max_positions, cfg.hidden)
        self.embedding_norm = nn.LayerNorm(cfg.hidden, eps=1e-12)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.layers))
        self.pooler = nn.Linear(cfg.hidden, cfg.hidden)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)
        x = self.embedding_norm(x)
        # Padding positions get a large negative bias so softmax gives them ~zero weight.
        mask_bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, mask_bias)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return x, pooled


def bert_encoder(cfg: BertConfig, *, seed: int = 0) -> BertEncoder:
    """The encoder in eval mode with deterministic random weights."""
    torch.manual_seed(seed)
    return BertEncoder(cfg).eval()
