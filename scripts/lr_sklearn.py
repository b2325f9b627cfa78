#!/usr/bin/env python3
"""The scikit-learn side of `parma train lr`: logistic regression on the same data, split and
features (hashed one-hot of every field, numeric fields in decile bins from the training rows,
2^18 buckets, optionally pairs of fields crossed), for docs/training.md.

    pip install scikit-learn pandas pyarrow
    parma data fetch adult && parma data fetch ml-100k
    python3 scripts/lr_sklearn.py adult [--crosses]
    python3 scripts/lr_sklearn.py ml-clicks

Reads the files from parma's cache ($XDG_CACHE_HOME/parma or ~/.cache/parma). The hash differs
from parma's (sklearn's FeatureHasher), so collisions differ; the features are the same.
"""
import argparse
import os
import sys

import numpy as np
import pandas as pd
from sklearn.feature_extraction import FeatureHasher
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, log_loss, roc_auc_score


def cache_dir():
    x = os.environ.get("XDG_CACHE_HOME")
    if x:
        return os.path.join(x, "parma")
    return os.path.join(os.path.expanduser("~"), ".cache", "parma")


def adult():
    df = pd.read_parquet(os.path.join(cache_dir(), "adult", "adult.parquet.brotli"))
    y = df.pop("income").astype(str).str.startswith(">50K").to_numpy()
    rows = df.to_dict("records")
    # Rows 0..16,281 are the official adult.test, the rest adult.data.
    train, test = rows[16281:], rows[:16281]
    return train, test, y[16281:], y[:16281]


def ml_clicks():
    d = os.path.join(cache_dir(), "ml-100k")
    read = lambda f: pd.read_csv(os.path.join(d, f), sep="\t", dtype=str).rename(columns=lambda c: c.split(":")[0])
    inter, users, items = read("ml-100k.inter"), read("ml-100k.user"), read("ml-100k.item")
    users = users.set_index("user_id")
    items = items.set_index("item_id")
    rows, y = [], []
    for u, i, r in zip(inter.user_id, inter.item_id, inter.rating.astype(float)):
        us = users.loc[u]
        row = {"user": u, "item": i, "age": str(int(us.age) // 10 * 10), "gender": us.gender,
               "occupation": us.occupation}
        for g in str(items.loc[i]["class"]).split():
            row["genre=" + g] = "1"
        rows.append(row)
        y.append(r >= 4)
    y = np.array(y)
    order = np.random.default_rng(0).permutation(len(rows))
    cut = len(rows) * 4 // 5
    tr, te = order[:cut], order[cut:]
    return [rows[k] for k in tr], [rows[k] for k in te], y[tr], y[te]


def tokens(train, test, crosses):
    numeric = [k for k, v in train[0].items() if isinstance(v, (int, float, np.integer, np.floating))]
    edges = {}
    for k in numeric:
        v = np.sort(np.array([r[k] for r in train], dtype=float))
        edges[k] = np.unique([v[q * (len(v) - 1) // 10] for q in range(1, 10)])

    def encode(r):
        t = []
        for k, v in r.items():
            if k in edges:
                t.append(f"{k}=#{int(np.searchsorted(edges[k], float(v), side='right'))}")
            else:
                t.append(f"{k}={v}")
        if crosses:
            t += [f"{a}^{b}" for i, a in enumerate(t) for b in t[i + 1:]]
        return t

    return [encode(r) for r in train], [encode(r) for r in test]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("data", choices=["adult", "ml-clicks"])
    p.add_argument("--crosses", action="store_true")
    p.add_argument("--C", type=float, default=1.0)
    a = p.parse_args()
    train, test, ytr, yte = adult() if a.data == "adult" else ml_clicks()
    ttr, tte = tokens(train, test, a.crosses)
    h = FeatureHasher(n_features=2**18, input_type="string", alternate_sign=False)
    xtr, xte = h.transform(ttr), h.transform(tte)
    m = LogisticRegression(C=a.C, max_iter=2000).fit(xtr, ytr)
    pr = m.predict_proba(xte)[:, 1]
    print(f"{a.data}{' crosses' if a.crosses else ''}: {len(ytr)} / {len(yte)} rows; "
          f"test AUC {roc_auc_score(yte, pr):.4f}, log loss {log_loss(yte, pr):.4f}, "
          f"accuracy {accuracy_score(yte, pr > 0.5):.4f}")


if __name__ == "__main__":
    sys.exit(main())
