"""Loss CPU kernels: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

Both take input / scores (N, C, d1..dk), an integer target (N, d1..dk) of
class indices in [0, C) and optional per-class weights (C,); a target equal
to `ignore_index` contributes nothing (neither loss nor weight). reduction:
'none' (loss per element, target's shape), 'sum', or 'mean' (the sum divided
by the sum of the weights taken, the count of non-ignored targets without
weights). float16 is computed in float32.
"""

from __future__ import annotations

import numpy as np

from ..registry import kernel


def nll(logp: np.ndarray, target: np.ndarray, weight, ignore_index, reduction: str, out: np.ndarray) -> None:
    """out = NegativeLogLikelihoodLoss(logp, target, weight) (the spec's loss[n, d] =
    -logp[n, target[n, d], d] * weight[target[n, d]]).

    Raises:
        IndexError: a target outside [0, C) that is not ignore_index.
    """
    n, c = logp.shape[:2]
    acc = np.float32 if logp.dtype == np.float16 else logp.dtype
    x = logp.reshape(n, c, -1).astype(acc, copy=False)
    t = target.reshape(n, -1).astype(np.int64)
    keep = None if ignore_index is None else t != ignore_index
    if keep is not None:
        t = np.where(keep, t, 0)
    if t.size and (t.min() < 0 or t.max() >= c):
        bad = int(t[(t < 0) | (t >= c)][0])
        raise IndexError(f"target {bad} is not a class index in [0, {c}) nor ignore_index={ignore_index}")
    loss = -np.take_along_axis(x, t[:, None, :], axis=1)[:, 0, :]
    w = None if weight is None else np.asarray(weight, acc)[t]
    if keep is not None:
        w = keep.astype(acc) if w is None else w * keep
    if w is not None:
        loss *= w
    if reduction == "none":
        np.copyto(out, loss.reshape(out.shape), casting="unsafe")
    elif reduction == "sum":
        out[...] = loss.sum()
    else:
        with np.errstate(invalid="ignore", divide="ignore"):
            out[...] = loss.sum() / (w.sum() if w is not None else loss.size)


@kernel("NegativeLogLikelihoodLoss", since=(12, 13, 22))
def negative_log_likelihood_loss(input, target, weight=None, *, out, ignore_index=None, reduction="mean"):
    """loss = -input[n, target[n, d], d] * weight[target[n, d]], reduced by `reduction`.

    Shapes: input (N, C, d1..dk) of log-probabilities, target (N, d1..dk)
    int32/int64, weight (C,). Output: (N, d1..dk) for 'none', else a scalar.
    Spec: Operators.md#NegativeLogLikelihoodLoss.
    """
    nll(input, target, weight, ignore_index, reduction, out)


def log_softmax_classes(scores: np.ndarray, out: np.ndarray) -> None:
    """out = log softmax of scores along axis 1 (the classes)."""
    m = scores.max(axis=1, keepdims=True)
    np.subtract(scores, m, out=out)
    s = np.exp(out).sum(axis=1, keepdims=True)
    out -= np.log(s)


@kernel("SoftmaxCrossEntropyLoss", since=(12, 13))
def softmax_cross_entropy_loss(scores, labels, weights=None, *, out, ignore_index=None, reduction="mean"):
    """loss = NegativeLogLikelihoodLoss(LogSoftmax(scores, axis=1), labels, weights); log_prob too.

    Shapes: scores (N, C, d1..dk), labels (N, d1..dk) int32/int64, weights
    (C,). Outputs: loss ((N, d1..dk) for 'none', else a scalar) and the
    optional log_prob (scores' shape). Spec: Operators.md#SoftmaxCrossEntropyLoss.
    """
    loss, log_prob = out
    acc = np.float32 if scores.dtype == np.float16 else scores.dtype
    lp = np.empty(scores.shape, acc) if log_prob is None or acc != scores.dtype else log_prob
    log_softmax_classes(scores.astype(acc, copy=False), lp)
    if log_prob is not None and lp is not log_prob:
        np.copyto(log_prob, lp, casting="unsafe")
    nll(lp, labels, weights, ignore_index, reduction, loss)
