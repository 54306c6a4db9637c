"""Thin evidence: the documented minimum of evaluations behind a model's vector, and what follows from it.

A vector built from a handful of evaluations lands almost anywhere: measured on MMLU-Pro and BFCL by
`scripts/evidence_minimum.py` (docs/results/evidence.md), a model's vector from fewer than
`MIN_EVALS` evaluations moves further from its own full-evidence vector than the nearest distinct
model sits, so it would be ranked by noise. Such a model is

- warned about when it is added, refined, replaced, imported or embedded (`thin_warning`);
- marked `low_evidence` in its record (`show`, `models list`, HTTP, the web table);
- ranked after the well-evidenced models in `search`, `route` (ranking and fallbacks) and clusters unless asked
  (`min_evals=0`): "do not outrank" means *listed after, with the mark*; when that pushes it past the
  k asked for, or out of a clustering, the result names it (`evidence_note`) and says how to include it.

One constant, here; the web table's per-task "low evidence" mark uses it too (registry.analytics.browse).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence, TypeVar

from indexing.errors import InputError

if TYPE_CHECKING:
    from indexing.model_rows import ModelRows

__all__ = ["MIN_EVALS", "is_thin", "thin_warning", "check_min_evals", "demote_thin", "evidence_note",
           "ThinEvidenceWarning", "warn_if_thin", "thin_models_warning", "thin_names"]

# Justified by docs/results/evidence.md (scripts/evidence_minimum.py): the smallest n of its grid (2, 4, ...,
# 256) at which a model's vector, built from n evaluations, lands nearer its own full-evidence vector than
# the nearest distinct model sits (median, over models and draws), on MMLU-Pro and on BFCL. BFCL needs 64
# (at 32: 1.09 times that distance, and the thin vector finds its own model first 24% of the time).
MIN_EVALS = 64

T = TypeVar("T")


class ThinEvidenceWarning(UserWarning):
    """`warnings.warn` category of the Python API's thin-evidence warning (the result's `warnings` say it too)."""


def is_thin(n_evals: int | None, min_evals: int = MIN_EVALS) -> bool:
    """Whether a vector built from `n_evals` evaluations is below `min_evals` (None: not embedded, not thin)."""
    return n_evals is not None and int(n_evals) < min_evals


def thin_warning(name: str, n_evals: int | None) -> str | None:
    """The warning for a model embedded from fewer than MIN_EVALS evaluations, else None."""
    if not is_thin(n_evals):
        return None
    return (f"{name} is embedded from {n_evals} evaluation{'s' if n_evals != 1 else ''}, fewer than the documented "
            f"minimum of {MIN_EVALS}: it is marked low evidence and ranked after well-evidenced models in search, "
            f"route and clusters (--min-evals 0 ranks it with them); add evaluations with `registry refine`")


def thin_models_warning(counts: dict[str, int], *, embedded: bool = False) -> str | None:
    """One warning for a batch (import; embed --all, `embedded`): which models are below MIN_EVALS."""
    thin = sorted(n for n, c in counts.items() if is_thin(c))
    if not thin:
        return None
    shown = ", ".join(f"{n} ({counts[n]})" for n in thin[:10]) + (f" and {len(thin) - 10} more" if len(thin) > 10 else "")
    return (f"{len(thin)} model{'s' if len(thin) != 1 else ''} with fewer than the documented minimum of {MIN_EVALS} "
            f"evaluations: {shown}; {'they are' if embedded else 'once embedded they are'} marked low evidence and "
            "ranked after well-evidenced models in search, route and clusters (--min-evals 0 ranks them with the others)")


def warn_if_thin(change: T, *, stacklevel: int = 3) -> T:
    """`change` (a ModelChange) as given; a thin one is also said through `warnings.warn`
    (ThinEvidenceWarning), as a library says it: its `warnings` list carries the same sentence.
    `stacklevel` as warnings.warn's, counted from here (3: the caller of this function's caller)."""
    message = thin_warning(change.name, change.n_evals)  # type: ignore[attr-defined]
    if message:
        import warnings

        warnings.warn(message, ThinEvidenceWarning, stacklevel=stacklevel)
    return change


def check_min_evals(value: Any, field: str = "min_evals") -> int:
    """`min_evals` as an int >= 0, else an InputError naming `field` (a bool or a float is refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            import numpy as np

            if isinstance(value, np.integer):
                value = int(value)
        except ImportError:  # pragma: no cover
            pass
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"min_evals must be a whole number of evaluations (0 or more), not {value!r}", field=field)
    if value < 0:
        raise InputError(f"min_evals must be 0 or more, not {value}", field=field)
    return value


def thin_names(rows: "ModelRows", min_evals: int) -> set[str]:
    """Names of the models-table rows (an index's) embedded from fewer than `min_evals`: read from the
    `n_evals` column (every route and search asks; a dict per row cost them at 100,000 models)."""
    if min_evals <= 0:
        return set()
    return {name for name, n in rows.column("n_evals").items() if is_thin(n, min_evals)}


def demote_thin(ranked: Sequence[T], thin: Callable[[T], bool], k: int) -> tuple[list[T], list[T]]:
    """(kept, pushed_out): `ranked` (best first) with the thin items after every other item, order kept
    within each group, cut to `k`; `pushed_out` are the thin items that were within the first `k` of
    `ranked` and are not in `kept`."""
    good = [x for x in ranked if not thin(x)]
    low = [x for x in ranked if thin(x)]
    kept = (good + low)[:k]
    kept_ids = {id(x) for x in kept}
    pushed = [x for x in list(ranked)[:k] if thin(x) and id(x) not in kept_ids]
    return kept, pushed


def evidence_note(names: Iterable[str], min_evals: int, *, what: str = "ranked after the well-evidenced models "
                  "and so left out of these results",
                  how: str = "min_evals=0 / --min-evals 0 includes them") -> str | None:
    """The sentence a result carries when thin models were moved or left out; None when none were."""
    names = list(names)
    if not names:
        return None
    return (f"{len(names)} model{'s' if len(names) != 1 else ''} embedded from fewer than {min_evals} evaluations "
            f"{what}: {', '.join(names)}" + (f" ({how})" if how else ""))
