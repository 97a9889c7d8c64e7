"""The offline probe (benchmarks/probe.py) against independent references: scikit-learn's float64
weighted kNN, scipy's minimiser of the same regularised softmax loss, separable data."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import minimize
from scipy.special import logsumexp
from sklearn.neighbors import KNeighborsClassifier

from benchmarks import probe


def blobs(seed: int, classes: int, train: int, val: int, dim: int = 16, noise: float = 1.5):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, dim, generator=g)
    out = []
    for n in (train, val):
        y = torch.arange(n) % classes  # every class in both sets, as ImageFolder gives them
        y = y[torch.randperm(n, generator=g)]
        out += [centres[y] + noise * torch.randn(n, dim, generator=g), y]
    return out


@pytest.mark.parametrize("seed, classes", [(0, 5), (1, 10), (2, 3)])
def test_knn_is_the_weighted_knn_rule(seed, classes) -> None:
    """Against scikit-learn's kNN in float64: the k = 20 train points of highest cosine similarity
    vote for their class with weight exp(similarity / 0.07) (cosine distance: 1 - similarity)."""
    train_x, train_y, val_x, val_y = blobs(seed, classes, 300, 120)
    ours = probe.knn_accuracy(train_x, train_y, val_x, val_y)
    assert 100 / classes < ours < 100  # neither chance nor trivially separable
    knn = KNeighborsClassifier(20, metric="cosine", weights=lambda d: np.exp((1 - d) / 0.07))
    predicted = knn.fit(train_x.double().numpy(), train_y.numpy()).predict(val_x.double().numpy())
    assert ours == pytest.approx(100.0 * float(np.mean(predicted == val_y.numpy())), abs=1e-9)


def test_logistic_fit_reaches_the_minimum_of_its_loss() -> None:
    train_x, train_y, _, _ = blobs(3, 4, 200, 4, dim=6, noise=2.0)
    l2, x, y = 1e-2, train_x.double().numpy(), train_y.numpy()

    def loss(theta: np.ndarray) -> float:  # mean cross-entropy + 0.5 * l2 * ||W||^2, bias free
        w, b = theta[:24].reshape(4, 6), theta[24:]
        logits = x @ w.T + b
        nll = logsumexp(logits, axis=1) - logits[np.arange(len(y)), y]
        return float(nll.mean() + 0.5 * l2 * (w**2).sum())

    best = minimize(loss, np.zeros(28), method="BFGS", options={"gtol": 1e-10}).fun
    clf = probe.fit_logistic(train_x, train_y, 4, l2)
    theta = torch.cat([clf.weight.flatten(), clf.bias]).detach().double().numpy()
    assert loss(theta) == pytest.approx(best, abs=1e-5)


def test_linear_probe_separates_separable_classes_with_a_stratified_holdout() -> None:
    g = torch.Generator().manual_seed(1)
    y = torch.arange(200) % 4
    x = torch.nn.functional.one_hot(y, 4).float() * 5 + 0.3 * torch.randn(200, 4, generator=g)
    x = torch.cat([x, torch.randn(200, 6, generator=g)], dim=1)  # plus noise dimensions
    acc, l2 = probe.linear_probe(x[:150], y[:150], x[150:], y[150:])
    assert acc == 100.0 and l2 == max(probe.L2_GRID)  # every L2 separates: the strongest wins
    fit, hold = probe.holdout_split(y[:150], 0.2, seed=0)
    assert sorted(fit.tolist() + hold.tolist()) == list(range(150))
    assert torch.bincount(y[hold], minlength=4).tolist() == [8, 8, 7, 7]  # 20 % of 38, 38, 37, 37
