"""The attention watch's statistics (docs/watching-attention.md) for Python programs.

`head_statistics(scores, weights, dscores, dweights, blocked, query_padding)` measures one
attention module on one batch, per head, from what an attention hook hands over
(`MultiheadAttention.register_attention_hook`) and the gradients reaching it
(`ember.autograd.grad`): a dict from each name of `quantities` to one value per head. The
projections' gradient norms, which need the module's weights, are not among them."""

from . import _C

_PROJECTIONS = ("grad_q_proj_norm", "grad_k_proj_norm")
quantities = [q for q in _C._watch.quantities if q not in _PROJECTIONS]
meaning = _C._watch.meaning


def head_statistics(scores, weights, dscores=None, dweights=None, blocked=None, query_padding=None):
    """Per head, the watch's quantities of one attention module on one batch: scores and
    weights [B, H, L, S] (scores may be None: score_std is then NaN), the loss's gradient
    reaching each (None: zero), the blocked pairs (bool, broadcasting to [B, H, L, S]) and
    the padding queries (bool [B, L]). Queries that are padding or have fewer than two
    allowed keys are left out. Returns {quantity: [one float per head]}."""
    for name, t in (("scores", scores), ("weights", weights), ("dscores", dscores), ("dweights", dweights)):
        if t is not None and (not isinstance(t, _C.Tensor) or not t.is_floating_point()):
            raise TypeError(f"head_statistics: {name} must be a float32 or float64 Tensor, got "
                            + (str(t.dtype) if isinstance(t, _C.Tensor) else type(t).__name__))
    for name, t in (("blocked", blocked), ("query_padding", query_padding)):
        if t is not None and (not isinstance(t, _C.Tensor) or t.dtype != _C.bool):
            raise TypeError(f"head_statistics: {name} must be a bool Tensor, got "
                            + (str(t.dtype) if isinstance(t, _C.Tensor) else type(t).__name__))
    stats = _C._watch.head_statistics(scores, weights, dscores, dweights, blocked, query_padding)
    return {q: v for q, v in stats.items() if q not in _PROJECTIONS}
