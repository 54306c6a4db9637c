"""The predictor G of a LOCUS checkpoint in numpy: P(correct) for embedded models on query vectors, read
from the checkpoint's safetensors without importing torch.

Routing needs only G (the models' z are stored): importing torch and building the whole Locus module
cost a cold `registry route` about a second of its three. `NumpyPredictor` computes exactly
`encoder.locus.Predictor.forward` in float32 (the same products and sums, in another order: the two
agree to about 1e-6 in probability, tests/test_predictor_numpy.py), and `predict` takes either it or a
torch `Locus`, so that callers holding a loaded Locus (the service, compare) keep it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from encoder.locus_config import LocusConfig, check_checkpoint_id, read_checkpoint_files
from indexing.errors import RegistryError

__all__ = ["NumpyPredictor", "load_predictor", "predict"]

_PREFIX = "predictor."
_CHUNK = 1 << 24  # floats in one (models, queries, g) block: bounds memory on long query lists


class NumpyPredictor:
    """G over [P z, V phi, P z * V phi] (+ difficulty b(phi), + soft-topic skill), as `Predictor`."""

    def __init__(self, config: LocusConfig, tensors: dict[str, np.ndarray]) -> None:
        self.config = config
        try:
            w = {k[len(_PREFIX):]: np.asarray(v, dtype=np.float32) for k, v in tensors.items() if k.startswith(_PREFIX)}
            g = config.g_dim
            self._p = (w["model_proj.weight"].T, w["model_proj.bias"]) if g != config.d else None
            self._v = (w["query_proj.weight"].T, w["query_proj.bias"])
            w1 = w["mlp.0.weight"]  # (hidden, 3g): the blocks reading z', u and z' * u
            self._w1 = (w1[:, :g].T.copy(), w1[:, g:2 * g].T.copy(), w1[:, 2 * g:].T.copy(), w["mlp.0.bias"])
            self._w2 = (w["mlp.3.weight"][0], w["mlp.3.bias"][0])
            self._b = (w["difficulty.weight"][0], w["difficulty.bias"][0]) if config.difficulty else None
            self._topic = ((w["topic.weight"].T, w["topic.bias"], w["skill.weight"].T)
                           if config.topics else None)
        except (KeyError, IndexError) as err:
            raise RegistryError(f"the checkpoint has no predictor tensor {err} for its config") from None
        if self._v[0].shape[0] != config.query_dim or self._w1[0].shape[0] != g:
            raise RegistryError(f"the checkpoint's predictor weights do not fit its config ({config.to_json()})")

    def logits(self, z: np.ndarray, phi: np.ndarray) -> np.ndarray:
        """z (M, d), phi (Q, D) -> correctness logits (M, Q), float32."""
        z = np.asarray(z, dtype=np.float32)
        phi = np.asarray(phi, dtype=np.float32)
        zg = z @ self._p[0] + self._p[1] if self._p is not None else z  # (M, g)
        u = phi @ self._v[0] + self._v[1]  # (Q, g)
        wa, wb, wc, b1 = self._w1
        model_part = zg @ wa + b1  # (M, hidden)
        query_part = u @ wb  # (Q, hidden)
        w2, b2 = self._w2
        out = np.empty((len(z), len(phi)), dtype=np.float32)
        step = max(1, _CHUNK // max(1, len(z) * zg.shape[1]))
        for start in range(0, len(phi), step):
            uq = u[start:start + step]
            hidden = (zg[:, None, :] * uq[None, :, :]) @ wc  # (M, q, hidden)
            hidden += model_part[:, None, :]
            hidden += query_part[None, start:start + step, :]
            np.maximum(hidden, 0.0, out=hidden)
            out[:, start:start + len(uq)] = hidden @ w2 + b2
        if self._topic is not None:
            tw, tb, skill = self._topic
            t = phi @ tw + tb  # (Q, topics)
            t = np.exp(t - t.max(axis=1, keepdims=True))
            t /= t.sum(axis=1, keepdims=True)
            out += (z @ skill) @ t.T  # sum_k (S z)_k softmax(T phi)_k, (M, Q)
        if self._b is not None:
            out += (phi @ self._b[0] + self._b[1])[None, :]
        return out

    def predict(self, z: np.ndarray, phi: np.ndarray) -> np.ndarray:
        """(M, Q) probabilities, float32."""
        logits = self.logits(z, phi).astype(np.float64)
        return (0.5 * (1.0 + np.tanh(0.5 * logits))).astype(np.float32)  # sigmoid, without overflow warnings


def load_predictor(directory: str | Path) -> tuple[NumpyPredictor, LocusConfig, str]:
    """Read and verify a checkpoint (its id recomputed from the config and every tensor, as
    `encoder.checkpoint.load_checkpoint` does) -> (its G in numpy, the config, the encoder id)."""
    config, tensors, recorded = read_checkpoint_files(directory)
    actual = check_checkpoint_id(directory, config, tensors, recorded)
    return NumpyPredictor(config, tensors), config, actual


def predict(locus, embeddings: np.ndarray, query_vectors: np.ndarray) -> np.ndarray:
    """(M, Q) P(correct) from a `NumpyPredictor` or a torch `Locus` (`encoder.inference.predict`)."""
    if isinstance(locus, NumpyPredictor):
        return locus.predict(embeddings, query_vectors)
    from encoder.inference import predict as torch_predict

    return torch_predict(locus, embeddings, query_vectors)
