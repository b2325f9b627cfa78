"""Row optimizers: how one embedding row's value ``[weights | state]`` changes under a gradient.

Each optimizer here reproduces the arithmetic of the torch optimizer it is named after on
sparse gradients (``nn.Embedding(sparse=True)``), operation for operation in float32, but
keeps its state in the row's parma value instead of a dense tensor beside the weights. So
the state moves, is replicated and is checkpointed with the row, and a worker that touches a
row finds its state where it finds its weights.

An optimizer computes *deltas*: parma adds them to the stored values (``Worker.push``), so
concurrent updates of the same row by several workers add up instead of overwriting each
other, as the ``param.add_`` of the torch optimizers would.
"""

from __future__ import annotations

import abc
import math
from typing import Tuple

import torch
from torch import Tensor

__all__ = ["RowOptimizer", "SGD", "Adagrad", "Adam"]


class RowOptimizer(abc.ABC):
    """The update rule of a :class:`parma.torch.Embedding`'s rows.

    A row of an embedding of dimension ``dim`` holds ``dim + state_len(dim)`` floats: the
    weights, then this optimizer's state. Subclasses define the state's length, its value
    for a fresh row, and the deltas of one update.
    """

    @abc.abstractmethod
    def state_len(self, dim: int) -> int:
        """Floats of optimizer state per row, after a row's ``dim`` weights."""

    def initial_state(self, rows: int, dim: int) -> Tensor:
        """The state of ``rows`` fresh rows: a float32 tensor ``(rows, state_len(dim))``.

        Zero unless the optimizer says otherwise (:class:`Adagrad`'s
        ``initial_accumulator_value``).
        """
        return torch.zeros(rows, self.state_len(dim), dtype=torch.float32)

    @abc.abstractmethod
    def deltas(self, values: Tensor, grads: Tensor, step: int) -> Tensor:
        """The changes of one update of distinct rows.

        Args:
            values: the rows' current values, float32 ``(n, dim + state_len(dim))``.
            grads: their gradients, one per row (duplicates already summed), float32
                ``(n, dim)``; a row whose gradient is zero is still updated, as torch's
                sparse optimizers update every row present in a sparse gradient.
            step: how many updates the embedding has applied, this one included (1 for
                the first); :class:`Adam` uses it under ``step="global"``.

        Returns:
            float32 ``(n, dim + state_len(dim))``, C-contiguous: what to add to ``values``.
        """


def _check_lr(lr: float) -> float:
    lr = float(lr)
    if not lr >= 0.0:
        raise ValueError(f"invalid learning rate {lr}: it must be at least 0")
    return lr


class SGD(RowOptimizer):
    """Stochastic gradient descent, as ``torch.optim.SGD(lr=lr)`` on a sparse gradient.

    ``w -= lr * g``. No state: a row's value is its weights. (torch's SGD rejects
    momentum and weight decay on sparse gradients as well.)

    Args:
        lr: the learning rate (torch's default, 1e-3).
    """

    def __init__(self, lr: float = 1e-3) -> None:
        self.lr = _check_lr(lr)

    def state_len(self, dim: int) -> int:
        """No state: 0."""
        return 0

    def deltas(self, values: Tensor, grads: Tensor, step: int) -> Tensor:
        """``-lr * grads``."""
        return grads.mul(-self.lr).contiguous()

    def __repr__(self) -> str:
        return f"parma.torch.SGD(lr={self.lr})"


class Adagrad(RowOptimizer):
    """AdaGrad, as ``torch.optim.Adagrad(lr, eps=eps, initial_accumulator_value=...)`` on a
    sparse gradient (``lr_decay=0``, ``weight_decay=0``: torch's defaults, and torch
    allows no weight decay on sparse gradients).

    State: the accumulator of squared gradients (``dim`` floats per row), starting at
    ``initial_accumulator_value``. An update: ``s += g * g``; ``w -= lr * g / (sqrt(s) +
    eps)``.

    Args:
        lr: the learning rate (torch's default, 1e-2).
        eps: added to the denominator's square root (torch's default, 1e-10).
        initial_accumulator_value: the accumulator of a fresh row.
    """

    def __init__(self, lr: float = 1e-2, eps: float = 1e-10, initial_accumulator_value: float = 0.0) -> None:
        self.lr = _check_lr(lr)
        if not eps >= 0.0:
            raise ValueError(f"invalid epsilon {eps}: it must be at least 0")
        if not initial_accumulator_value >= 0.0:
            raise ValueError(
                f"invalid initial_accumulator_value {initial_accumulator_value}: it must be at least 0"
            )
        self.eps = float(eps)
        self.initial_accumulator_value = float(initial_accumulator_value)

    def state_len(self, dim: int) -> int:
        """The accumulator: ``dim``."""
        return dim

    def initial_state(self, rows: int, dim: int) -> Tensor:
        """Accumulators filled with ``initial_accumulator_value``."""
        return torch.full((rows, dim), self.initial_accumulator_value, dtype=torch.float32)

    def deltas(self, values: Tensor, grads: Tensor, step: int) -> Tensor:
        """``[-lr * g / (sqrt(s + g * g) + eps) | g * g]``."""
        dim = grads.shape[1]
        out = torch.empty(values.shape, dtype=torch.float32)
        squares, step_ = out[:, dim:], out[:, :dim]
        # As torch: state_sum.add_(g²); std = state_sum.sqrt().add_(eps); param.add_(g / std, alpha=-lr).
        # Computed in place in `out` (the weights' part holds std until the last line).
        torch.mul(grads, grads, out=squares)
        torch.add(values[:, dim:], squares, out=step_)
        step_.sqrt_().add_(self.eps)
        torch.div(grads, step_, out=step_)
        step_.mul_(-self.lr)
        return out

    def __repr__(self) -> str:
        return (
            f"parma.torch.Adagrad(lr={self.lr}, eps={self.eps}, "
            f"initial_accumulator_value={self.initial_accumulator_value})"
        )


class Adam(RowOptimizer):
    """Adam on sparse gradients, as ``torch.optim.SparseAdam(lr, betas, eps)``.

    State per row: the first moment ``m`` (``dim`` floats), the second moment ``v``
    (``dim``), and the row's own step count (1 float, exact up to 2**24 updates of the
    row). An update of a row with gradient ``g`` at step ``t``::

        m += (1 - beta1) * (g - m)
        v += (1 - beta2) * (g * g - v)
        w -= lr * sqrt(1 - beta2**t) / (1 - beta1**t) * m / (sqrt(v) + eps)

    Args:
        lr: the learning rate (torch's default, 1e-3).
        betas: ``(beta1, beta2)``, the moments' decay rates.
        eps: added to the denominator's square root.
        step: which ``t`` corrects the bias. ``"row"`` (the default): the row's own count
            of updates, kept in its value, so it survives relocation, replication and
            checkpoints and is right for rows updated at very different rates (an
            embedding's rare rows). ``"global"``: the embedding's count of ``step()`` calls
            that applied a gradient (one counter per module object, saved in its
            ``state_dict``), which is what ``SparseAdam`` does: its step count belongs to the
            whole parameter. The row's own count is stored in both modes.
    """

    STEPS = ("row", "global")

    def __init__(
        self,
        lr: float = 1e-3,
        betas: Tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        step: str = "row",
    ) -> None:
        self.lr = _check_lr(lr)
        beta1, beta2 = (float(b) for b in betas)
        for i, b in enumerate((beta1, beta2)):
            if not 0.0 <= b < 1.0:
                raise ValueError(f"invalid beta parameter at index {i}: {b} (it must be in [0, 1))")
        if not eps > 0.0:
            raise ValueError(f"invalid epsilon {eps}: it must be greater than 0")
        if step not in self.STEPS:
            raise ValueError(f"invalid step {step!r}: it must be 'row' or 'global'")
        self.betas = (beta1, beta2)
        self.eps = float(eps)
        self.step = step

    def state_len(self, dim: int) -> int:
        """``m``, ``v`` and the step count: ``2 * dim + 1``."""
        return 2 * dim + 1

    def deltas(self, values: Tensor, grads: Tensor, step: int) -> Tensor:
        """The changes of ``w``, ``m``, ``v`` and the row's count (+1)."""
        beta1, beta2 = self.betas
        dim = grads.shape[1]
        m = values[:, dim : 2 * dim]
        v = values[:, 2 * dim : 3 * dim]
        out = torch.empty(values.shape, dtype=torch.float32)
        # The order of torch.optim._functional.sparse_adam, so that the results are equal.
        dm = grads.sub(m).mul_(1 - beta1)
        dv = grads.pow(2).sub_(v).mul_(1 - beta2)
        out[:, dim : 2 * dim] = dm
        out[:, 2 * dim : 3 * dim] = dv
        out[:, 3 * dim] = 1.0
        numer = dm.add_(m)
        denom = dv.add_(v).sqrt_().add_(self.eps)
        if self.step == "global":
            bias_correction1 = 1 - beta1**step
            bias_correction2 = 1 - beta2**step
            global_size = self.lr * math.sqrt(bias_correction2) / bias_correction1
            torch.mul(numer.div_(denom), -global_size, out=out[:, :dim])
        else:
            t = values[:, 3 * dim].double().add(1.0)
            step_size = (1 - torch.pow(beta2, t)).sqrt_().mul_(self.lr).div_(1 - torch.pow(beta1, t))
            torch.mul(numer.div_(denom), step_size.neg_().float().unsqueeze(1), out=out[:, :dim])
        return out

    def __repr__(self) -> str:
        return f"parma.torch.Adam(lr={self.lr}, betas={self.betas}, eps={self.eps}, step={self.step!r})"
