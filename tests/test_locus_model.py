"""LOCUS model: shapes, permutation and padding invariance, determinism, the shared query projection."""
from __future__ import annotations

import pytest
import torch

from encoder.locus import Locus, LocusConfig, LocusEncoder, Predictor

D = 12


def tiny(**overrides) -> Locus:
    torch.manual_seed(0)
    config = LocusConfig(query_dim=D, d=16, latents=4, blocks=2, heads=2, predictor_hidden=8, **overrides)
    return Locus(config).eval()


def a_set(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    phi = torch.nn.functional.normalize(torch.randn(n, D, generator=g), dim=-1)
    y = (torch.rand(n, generator=g) > 0.5).float()
    return phi, y


def test_shapes_and_config_round_trip():
    locus = tiny(encoder_dropout=0.1, predictor_d=8)
    phi, y = a_set(7, 0)
    z = locus.embed(phi[None], y[None])
    assert z.shape == (1, 16)
    assert locus(z, phi).shape == (1, 7)
    assert LocusConfig.from_json(locus.config.to_json()) == locus.config
    with pytest.raises(ValueError):
        LocusConfig.from_json('{"query_dim": 3, "bogus": 1}')
    with pytest.raises(ValueError):
        LocusConfig(query_dim=D, d=10, heads=4)


def test_constructors_are_keyword_only():
    with pytest.raises(TypeError):
        LocusEncoder(D)  # type: ignore[misc]
    with pytest.raises(TypeError):
        Predictor(D)  # type: ignore[misc]


@torch.no_grad()
def test_permutation_invariant():
    locus = tiny()
    phi, y = a_set(50, 1)
    z = locus.embed(phi[None], y[None])
    for seed in range(3):
        perm = torch.randperm(50, generator=torch.Generator().manual_seed(seed))
        assert torch.allclose(locus.embed(phi[perm][None], y[perm][None]), z, atol=1e-5)


@torch.no_grad()
def test_padding_invariant_in_a_batch_with_longer_sets():
    locus = tiny()
    sets = [a_set(n, 10 + n) for n in (5, 40, 17)]
    alone = torch.cat([locus.embed(phi[None], y[None]) for phi, y in sets])
    width = 64  # more padding than any set needs
    phi_b = torch.full((3, width, D), 7.0)  # garbage in the padded slots must not matter
    y_b = torch.ones(3, width)
    pad = torch.ones(3, width, dtype=torch.bool)
    for i, (phi, y) in enumerate(sets):
        phi_b[i, : len(y)], y_b[i, : len(y)], pad[i, : len(y)] = phi, y, False
    batched = locus.embed(phi_b, y_b, pad)
    assert torch.allclose(batched, alone, atol=1e-5)
    # and a single set with trailing padding equals the set alone
    assert torch.allclose(locus.embed(phi_b[:1], y_b[:1], pad[:1]), alone[:1], atol=1e-5)


@torch.no_grad()
def test_precomputed_projection_equals_direct_tokens():
    locus = tiny()
    phi, y = a_set(9, 3)
    proj = locus.encoder.project_queries(phi)  # once per query
    via_proj = locus.encoder.embed(type(proj)(proj.base[None], proj.signed[None]), y[None])
    assert torch.allclose(via_proj, locus.embed(phi[None], y[None]), atol=1e-6)
    # the token equals one Linear over [phi, y, phi * (2y - 1)]
    enc = locus.encoder
    W = torch.cat([enc.token_query.weight, enc.token_score[:, None], enc.token_signed.weight], dim=1)
    concat = torch.cat([phi, y[:, None], phi * (2 * y[:, None] - 1)], dim=1)
    assert torch.allclose(enc.tokens(proj, y), concat @ W.T + enc.token_query.bias, atol=1e-6)


def test_eval_mode_is_deterministic_even_with_dropout():
    locus = tiny(dropout=0.5, encoder_dropout=0.5)
    phi, y = a_set(30, 4)
    with torch.no_grad():
        z1, z2 = locus.embed(phi[None], y[None]), locus.embed(phi[None], y[None])
        assert torch.equal(z1, z2)
        assert torch.equal(locus(z1, phi), locus(z2, phi))


def test_predictor_grid_matches_paired_logits():
    locus = tiny()
    phi, y = a_set(6, 5)
    with torch.no_grad():
        z = torch.randn(3, 16)
        grid = locus(z, phi)  # (3, 6)
        u, b = locus.predictor.project_queries(phi)
        paired = locus.predictor.logits(z[1:2].expand(6, -1), u, b)
    assert torch.allclose(grid[1], paired, atol=1e-6)


def test_difficulty_does_not_change_routing_order():
    """b(phi) is shared by all models: the argmax over models is the same with or without it."""
    locus = tiny()
    phi, _ = a_set(20, 6)
    with torch.no_grad():
        z = torch.randn(5, 16)
        with_b = locus(z, phi)
        u, _ = locus.predictor.project_queries(phi)
        without_b = locus.predictor.logits(z[:, None], u[None])
    assert torch.equal(with_b.argmax(0), without_b.argmax(0))


@pytest.mark.parametrize("overrides", [dict(topics=5), dict(topics=3, predictor_d=4, difficulty=False)])
def test_predictor_variants_grid_matches_paired(overrides):
    locus = tiny(**overrides)
    phi, y = a_set(6, 7)
    with torch.no_grad():
        z = locus.embed(torch.stack([phi, phi.flip(0)]), torch.stack([y, 1 - y]))  # (2, 16)
        grid = locus(z, phi)  # (2, 6)
        u, b = locus.predictor.project_queries(phi)
        paired = locus.predictor.logits(z[1:2].expand(6, -1), u, b)
    assert grid.shape == (2, 6)
    assert torch.allclose(grid[1], paired, atol=1e-6)


def _reference_attention(mha, q, kv, padding_mask=None):
    """The explicit softmax(Q K^T / sqrt(d/h)) V that MultiHeadAttention computed before it used
    torch's scaled_dot_product_attention: the reference the fused path must match."""
    import math

    B, nq, d = q.shape
    nk, h = kv.shape[1], mha.heads
    Q = mha.q(q).view(B, nq, h, d // h).transpose(1, 2)
    K = mha.k(kv).view(B, nk, h, d // h).transpose(1, 2)
    V = mha.v(kv).view(B, nk, h, d // h).transpose(1, 2)
    scores = Q @ K.transpose(-2, -1) / math.sqrt(d // h)
    if padding_mask is not None:
        scores = scores.masked_fill(padding_mask[:, None, None, :], float("-inf"))
    return mha.out((scores.softmax(dim=-1) @ V).transpose(1, 2).reshape(B, nq, d))


@torch.no_grad()
def test_sdpa_attention_matches_the_explicit_softmax_path():
    from encoder.locus import MultiHeadAttention

    torch.manual_seed(0)
    mha = MultiHeadAttention(d=16, heads=4).eval()
    q, kv = torch.randn(3, 5, 16), torch.randn(3, 11, 16)
    pad = torch.zeros(3, 11, dtype=torch.bool)
    pad[0, 7:], pad[2, 1:] = True, True  # ragged sets, one with a single real member
    assert torch.allclose(mha(q, kv), _reference_attention(mha, q, kv), atol=1e-6)
    assert torch.allclose(mha(q, kv, pad), _reference_attention(mha, q, kv, pad), atol=1e-6)
    # and the whole encoder: swap the reference in and compare embeddings of padded sets
    locus = tiny()
    phi = torch.nn.functional.normalize(torch.randn(3, 11, D), dim=-1)
    y = (torch.rand(3, 11) > 0.5).float()
    fused = locus.embed(phi, y, pad)
    originals = {}
    for module in locus.modules():
        if isinstance(module, MultiHeadAttention):
            originals[module] = module.forward
            module.forward = (lambda m: lambda q, kv, mask=None: _reference_attention(m, q, kv, mask))(module)
    try:
        reference = locus.embed(phi, y, pad)
    finally:
        for module, forward in originals.items():
            module.forward = forward
    assert torch.allclose(fused, reference, atol=1e-5)
