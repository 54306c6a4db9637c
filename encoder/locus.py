"""The LOCUS model (arXiv 2601.21082, section 2): encoder F and correctness predictor G.

A model m is a set of evaluations S_m = {(phi(x_i), y_i)}: query vectors (D) with scores in [0, 1].

    t_i   = h(phi_i, y_i) = W [phi_i, y_i, phi_i * (2 y_i - 1)] + c          tokens, (n, d)
          = (A phi_i + c) + y_i w + (2 y_i - 1) (C phi_i)                     (h is linear)
    X(0)  = [t_1; ...; t_n]
    H(l)  = TBlock(U(l), X(l-1), X(l-1))        r learned latents attend to the set  (ISAB)
    X(l)  = TBlock(X(l-1), H(l), H(l))          the set attends back to the latents
    z_m   = Linear(TBlock(s, X(L), X(L)))       one learned query pools the set      (PMA)
    p     = sigmoid(G(z_m, phi(x)))             G = MLP([z', u, z' * u]) + b(phi) + <pi(phi), S z>
                                                z' = P z, u = V phi, pi(phi) = softmax(T phi)

    TBlock(Q, K, V) = LN(Q' + FFN(Q')),  Q' = LN(Q + MHA(Q, K, V))

Because h is linear, the query-only parts A phi + c and C phi are computed once per query
(`LocusEncoder.project_queries`) and reused by every model scored on that query (`LocusEncoder.embed`).
No positional encodings anywhere, so z_m does not depend on the order of S_m; padded set members are
excluded from every attention by `padding_mask` (True = padding, PyTorch's key_padding_mask convention).
b(phi) is an optional per-query difficulty (an IRT-like bias shared by all models): it moves every
model's logit on a query alike, so routing is decided by the model-specific part alone. The optional
soft-topic term (`topics` > 0) reads a per-topic skill S z off the embedding and mixes it by the query's
soft topic assignment pi(phi): room for a smoothed "accuracy per subject" next to the MLP. With topics=0, predictor_d=None and
difficulty=False, G is the paper's (release's) MLP over [z, U phi, z * U phi].
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from encoder.locus_config import LocusConfig  # torch-free, so that route can read a checkpoint without torch

__all__ = [
    "LocusConfig",
    "QueryProjection",
    "MultiHeadAttention",
    "TBlock",
    "ISAB",
    "PMA",
    "LocusEncoder",
    "Predictor",
    "Locus",
    "default_device",
]


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class QueryProjection(NamedTuple):
    """The query-only part of the tokens: token = base + y * w + (2y - 1) * signed."""

    base: Tensor  # (..., d)  A phi + c
    signed: Tensor  # (..., d)  C phi


# ---------------------------------------------------------------------------------------------
# Set Transformer blocks
# ---------------------------------------------------------------------------------------------


class MultiHeadAttention(nn.Module):
    """MHA(Q, K, V) without projection biases, scores scaled by sqrt(d / heads); the attention itself is
    torch's scaled_dot_product_attention (fused kernels where the platform has them)."""

    def __init__(self, *, d: int, heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        self.drop = nn.Dropout(dropout)

    def forward(self, q: Tensor, kv: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        B, nq, d = q.shape
        nk = kv.shape[1]
        h = self.heads
        Q = self.q(q).view(B, nq, h, d // h).transpose(1, 2)  # (B, h, nq, d/h)
        K = self.k(kv).view(B, nk, h, d // h).transpose(1, 2)  # (B, h, nk, d/h)
        V = self.v(kv).view(B, nk, h, d // h).transpose(1, 2)  # (B, h, nk, d/h)
        # SDPA's boolean mask is True where attention is allowed: the complement of the padding mask
        keep = None if padding_mask is None else ~padding_mask[:, None, None, :]  # (B, 1, 1, nk)
        out = F.scaled_dot_product_attention(Q, K, V, attn_mask=keep,
                                             dropout_p=self.drop.p if self.training else 0.0)  # (B, h, nq, d/h)
        return self.out(out.transpose(1, 2).reshape(B, nq, d))  # (B, nq, d)


class TBlock(nn.Module):
    """TBlock(Q, K=V) = LN(Q' + FFN(Q')), Q' = LN(Q + MHA(Q, K, V)); the Set Transformer's MAB."""

    def __init__(self, *, d: int, heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.mha = MultiHeadAttention(d=d, heads=heads, dropout=dropout)
        self.ln0 = nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Dropout(dropout), nn.Linear(2 * d, d))
        self.ln1 = nn.LayerNorm(d)
        self.drop = nn.Dropout(dropout)

    def forward(self, q: Tensor, kv: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        q = self.ln0(q + self.drop(self.mha(q, kv, padding_mask)))  # (B, nq, d)
        return self.ln1(q + self.drop(self.ffn(q)))  # (B, nq, d)


class ISAB(nn.Module):
    """Latent bottleneck block: H = TBlock(U, X, X); X = TBlock(X, H, H). Cost O(n r), not O(n^2)."""

    def __init__(self, *, d: int, heads: int, latents: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.latents = nn.Parameter(torch.empty(1, latents, d))  # U, (1, r, d)
        nn.init.xavier_uniform_(self.latents)
        self.gather = TBlock(d=d, heads=heads, dropout=dropout)
        self.scatter = TBlock(d=d, heads=heads, dropout=dropout)

    def forward(self, x: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        H = self.gather(self.latents.expand(x.shape[0], -1, -1), x, padding_mask)  # (B, r, d)
        return self.scatter(x, H)  # (B, n, d); the latents are never padding


class PMA(nn.Module):
    """Learned-query pooling: z = TBlock(s, X, X), one seed vector s."""

    def __init__(self, *, d: int, heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.seed = nn.Parameter(torch.empty(1, 1, d))  # s, (1, 1, d)
        nn.init.xavier_uniform_(self.seed)
        self.pool = TBlock(d=d, heads=heads, dropout=dropout)

    def forward(self, x: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        return self.pool(self.seed.expand(x.shape[0], -1, -1), x, padding_mask)[:, 0]  # (B, d)


# ---------------------------------------------------------------------------------------------
# F and G
# ---------------------------------------------------------------------------------------------


class LocusEncoder(nn.Module):
    """F: a set of (phi, y) evaluations -> z (d), permutation invariant."""

    def __init__(
        self, *, query_dim: int, d: int = 128, latents: int = 64, blocks: int = 2, heads: int = 4,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        # h(phi, y) = A phi + c + y w + (2y - 1) C phi, i.e. one Linear over [phi, y, phi * (2y - 1)]
        self.token_query = nn.Linear(query_dim, d)  # A, c
        self.token_signed = nn.Linear(query_dim, d, bias=False)  # C
        self.token_score = nn.Parameter(torch.empty(d))  # w
        nn.init.uniform_(self.token_score, -1 / math.sqrt(2 * query_dim + 1), 1 / math.sqrt(2 * query_dim + 1))
        self.blocks = nn.ModuleList(
            ISAB(d=d, heads=heads, latents=latents, dropout=dropout) for _ in range(blocks)
        )
        self.pma = PMA(d=d, heads=heads, dropout=dropout)
        self.head = nn.Linear(d, d)

    def query_linears(self) -> list[nn.Linear]:
        """The Linear layers that read phi, in the order `project_linear` takes their outputs."""
        return [self.token_query, self.token_signed]

    def project_linear(self, parts: list[Tensor]) -> QueryProjection:
        return QueryProjection(parts[0], parts[1])

    def project_queries(self, phi: Tensor) -> QueryProjection:
        """(..., D) query vectors -> their query-only token parts, each (..., d). Once per query."""
        return self.project_linear([linear(phi) for linear in self.query_linears()])

    def tokens(self, proj: QueryProjection, y: Tensor) -> Tensor:
        y = y[..., None]  # (B, n, 1)
        return proj.base + y * self.token_score + (2 * y - 1) * proj.signed  # (B, n, d)

    def embed(self, proj: QueryProjection, y: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        """Precomputed projections (B, n, d) and scores (B, n) -> z (B, d).
        padding_mask (B, n): True where the member is padding; every set needs one real member."""
        x = self.tokens(proj, y)  # X(0), (B, n, d)
        for block in self.blocks:
            x = block(x, padding_mask)  # X(l), (B, n, d)
        return self.head(self.pma(x, padding_mask))  # z, (B, d)

    def forward(self, phi: Tensor, y: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        """phi (B, n, D), y (B, n) -> z (B, d)."""
        return self.embed(self.project_queries(phi), y, padding_mask)


class Predictor(nn.Module):
    """G: logit of P(y = 1 | z, phi) = MLP([z', u, z' * u]) + b(phi), z' = P z, u = V phi."""

    def __init__(
        self, *, query_dim: int, d: int = 128, hidden: int = 64, dropout: float = 0.1,
        g_dim: int | None = None, difficulty: bool = True, topics: int = 0,
    ) -> None:
        super().__init__()
        g = g_dim or d
        self.model_proj = nn.Linear(d, g) if g != d else nn.Identity()  # P
        self.query_proj = nn.Linear(query_dim, g)  # V
        self.mlp = nn.Sequential(nn.Linear(3 * g, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, 1))
        self.difficulty = nn.Linear(query_dim, 1) if difficulty else None  # b(phi)
        self.topic = nn.Linear(query_dim, topics) if topics else None  # T: query -> topic logits
        self.skill = nn.Linear(d, topics, bias=False) if topics else None  # S: model -> skill per topic

    def query_linears(self) -> list[nn.Linear]:
        """The Linear layers that read phi, in the order `project_linear` takes their outputs."""
        return [self.query_proj] + [m for m in (self.difficulty, self.topic) if m is not None]

    def project_linear(self, parts: list[Tensor]) -> tuple[Tensor, Tensor | None]:
        """The outputs of `query_linears` -> u (..., g [+ topics]) and b (...,) or None."""
        rest = iter(parts[1:])
        u = parts[0]  # (..., g)
        b = next(rest)[..., 0] if self.difficulty is not None else None
        if self.topic is not None:
            u = torch.cat([u, next(rest).softmax(dim=-1)], dim=-1)  # (..., g + topics)
        return u, b

    def project_queries(self, phi: Tensor) -> tuple[Tensor, Tensor | None]:
        """(..., D) -> u (..., g [+ topics]) and b (...,) or None. Once per query."""
        return self.project_linear([linear(phi) for linear in self.query_linears()])

    def logits(self, z: Tensor, u: Tensor, b: Tensor | None = None) -> Tensor:
        """z (..., d) and u (..., g [+ topics]) from project_queries, broadcastable; b broadcastable
        to the result. -> (...)."""
        if self.topic is not None:
            u, topic = u[..., : -self.topic.out_features], u[..., -self.topic.out_features :]
        zg = self.model_proj(z)  # (..., g)
        zg, u = torch.broadcast_tensors(zg, u)
        out = self.mlp(torch.cat([zg, u, zg * u], dim=-1))[..., 0]  # (...)
        if self.topic is not None:
            out = out + (topic * self.skill(z)).sum(-1)  # soft per-topic skill, (...)
        return out + b if b is not None else out

    def forward(self, z: Tensor, phi: Tensor) -> Tensor:
        """z (M, d), phi (Q, D) -> logits (M, Q) for every model on every query."""
        u, b = self.project_queries(phi)
        return self.logits(z[:, None, :], u[None, :, :], b[None, :] if b is not None else None)


class Locus(nn.Module):
    """F and G together, built from a LocusConfig."""

    def __init__(self, config: LocusConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = LocusEncoder(
            query_dim=config.query_dim, d=config.d, latents=config.latents, blocks=config.blocks,
            heads=config.heads, dropout=config.encoder_dropout,
        )
        self.predictor = Predictor(
            query_dim=config.query_dim, d=config.d, hidden=config.predictor_hidden, dropout=config.dropout,
            g_dim=config.g_dim, difficulty=config.difficulty, topics=config.topics,
        )

    def embed(self, phi: Tensor, y: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        """phi (B, n, D), y (B, n), padding_mask (B, n) True = padding -> z (B, d)."""
        return self.encoder(phi, y, padding_mask)

    def forward(self, z: Tensor, phi: Tensor) -> Tensor:
        """z (M, d), phi (Q, D) -> correctness logits (M, Q)."""
        return self.predictor(z, phi)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device
