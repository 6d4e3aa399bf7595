"""One-shot federated baselines built for frozen pretrained models: each owner computes a few statistics of its
own features once, sends them, and the server builds a classifier from them in closed form. One round, nothing
trained by gradient, nothing sent back to the owners but (for two methods) the plan they compute under.

    method      paper (authors' code)                                  each owner sends (C_k its classes)   wire
    fedncm      Legate et al., "Guiding the last layer in federated    counts (C_k,), means (C_k, d)        float32
                learning with pre-trained models", NeurIPS 2023
                (github.com/GwenLegate/GuidingLastLayerFLPretrain)
    fed3r       Fanì et al., "Accelerating heterogeneous federated     G (d+1, d+1), class_sums (C_k, d+1)   float64
                learning with closed-form classifiers", ICML 2024
                (github.com/Erosinho13/Fed3R, src/fed3r.py)
    fed3r-rf    the same paper's Fed3R-RF: random Fourier features     G (D+1, D+1), class_sums (C_k, D+1)   float64
    fed3r-relu  not in the paper: Fed3R on the random ReLU features    G (M+1, M+1), class_sums (C_k, M+1)   float64
                RED's router reads (projection.py, M = 2,048)
    fedcof      Goswami et al., "Covariances for free: exploiting      counts (R,), means (R, d)             float32
                mean distributions for training-free federated         R = C_k (subsets 1, the authors'
                learning", NeurIPS 2025 (github.com/dipamgoswami/      training-free code) or up to
                FedCOF: federate_classes.py; Init_FT_LP/ for subsets)  subsets x C_k (Init_FT_LP's --subsets)

d = 384 (all-MiniLM-L6-v2's mean-pooled features), D the random Fourier width, M the ReLU width. Every upload also
names its classes (`Upload.classes`: the class of each row of its per-class arrays), strings every method sends
alike; `upload_bytes` counts the float arrays only, `compact_bytes` them as `redkit federate` sends RED's module
files (one safetensors file in its exact compact form: redkit/federated/compact.py).

The classifiers (h: (N, d) a query's frozen features, φ the method's feature map, [φ, 1] with the bias column):

    fedncm      scores = cos(h, μ_c), μ_c = Σ_k n_ck μ_ck / n_c                        (the authors: the weight rows
                are the normalised class means, h · μ_c/|μ_c|: the same argmax)
    fed3r*      A = Σ_k G_k + λ I,  B = Σ_k B_k (D', C),  W = A⁻¹ B;  bias = W's last row, w_c = W[:-1, c]:
                scores_c = (φ(h) · w_c + bias_c) / |w_c|                             (src/fed3r.py: calc_ridge_params,
                normalize_W; λ also on the bias, as there)
    fedcof      per class c, from the K_c means μ_ck (counts n_ck) its owners sent:
                    Σ̂_c = Σ_k n_ck (μ_ck - μ_c)(μ_ck - μ_c)ᵀ / (K_c - 1)   (/ K_c when K_c = 1: then Σ̂_c = 0)
                    G_est = Σ_c (n_c - 1)(Σ̂_c + γ I) + N ḡ ḡᵀ,    ḡ = Σ_c n_c μ_c / N
                    (the within-class part only: the between-class scatter Σ n_c (μ_c - ḡ)(μ_c - ḡ)ᵀ is left out, as
                    the paper and federate_classes.py do),  W = G_est⁻¹ B (B column c = n_c μ_c),
                scores_c = h · w_c / |w_c|                                           (FedCOFServer.aggregate)

Σ̂_c is unbiased (E Σ̂_c = Σ_c) when a class's examples are i.i.d. across its owners: Cov(μ_ck) = Σ_c / n_ck.

What departs from the authors' code, and why:
- One class, one owner (CLINC150 split by domain): FedCOF's estimator has nothing to estimate from. The authors'
  training-free code divides the (zero) spread by K_c = 1 instead of K_c - 1, so every class's covariance is its
  shrinkage γ I alone and G_est = γ (N - C) I + N ḡ ḡᵀ: W's columns are the class sums with the direction of the
  global mean ḡ partly projected out (by Sherman-Morrison, w_c ∝ (I - β ḡ ḡᵀ) μ_c, β = N / (γ (N - C) + N |ḡ|²)),
  then normalised: FedNCM's dot-product classifier less a share of ḡ that γ sets. That is what `fedcof` runs here,
  faithfully. The authors' Init_FT_LP code (FedCOF followed by fine-tuning) replaces a class seen in one mean by
  the covariance of that mean and five noisy copies (σ² = 0.01) instead; that is not the training-free method the
  paper's tables use, and it is not run here.
- `subsets` > 1 is the authors' Init_FT_LP option (sync_trainer_round.py, cp_init): each owner splits each of its
  classes with at least 4 examples at random into min(subsets, ⌊n/2⌋) parts (the last part takes the remainder)
  and sends one count and mean per part, which the server treats as further clients. It gives the estimator
  something to work with when few owners hold a class, at subsets x FedNCM's bytes; it is a departure from the
  training-free code (root federate_classes.py), and at subsets = n the owner would be sending its features.
  Here the split is drawn from the plan's seed (the authors': torch's global generator), and the server is
  federate_classes.py's (Init_FT_LP adds γ I to G_est once more: (N - C) times smaller than the γ term already in
  it).
- Fed3R-RF's random Fourier features are Rahimi and Recht's, φ(h) = √(2/D) cos(h Ω + b), Ω (d, D) ~ N(0, σ⁻²),
  b ~ U[0, 2π), drawn from the plan's seed (the paper's RF variant; the released code has none, so the bias column
  and the column normalisation of plain Fed3R are kept for it). σ and D are the plan the server sends.
- λ is written relative to the mean eigenvalue of ΣG, λ = ρ tr(ΣG) / D' (ridge.py's convention), so one grid of ρ
  serves every feature map; the classifier at a given λ is the authors' (the absolute λ is in `details`).
- Everything is solved in float64 (Cholesky, LU where it fails), where the authors solve in float32 (Fed3R:
  torch.linalg.solve; FedCOF: pinv, the same inverse for the positive definite G_est here).
- Wire types: Fed3R's G is summed over owners and then solved at a small λ, so it is sent in float64 (float32
  counted beside it by the experiment); FedNCM's and FedCOF's means in float32 as the authors' features are, counts
  in the same type (integers, exact in float32 to 2²⁴).

The registry (`ONESHOT`) holds each method's class; `ONESHOT[name](dim, **plan)` is one run's method, whose
`upload(h, y, labels)` is what an owner runs on its own features and `server(uploads, **options)` what the server
runs on the uploads received (checked: a malformed upload is refused in one line). In reading order:

    base.py     what an owner sends (Upload), the classifier the server builds, the methods' base class and registry
    maps.py     the feature maps: identity, random Fourier features, RED's random ReLU features
    means.py    class means and counts, merged across owners by class (FedNCM's and FedCOF's uploads)
    fedncm.py   FedNCM
    fedcof.py   FedCOF
    fed3r.py    Fed3R, Fed3R-RF, Fed3R on RED's features
"""

from redkit.federated.oneshot.base import (
    ONESHOT,
    OneShotClassifier,
    OneShotMethod,
    Upload,
    as_wire,
    compact_bytes,
    upload_bytes,
)
from redkit.federated.oneshot.fed3r import Fed3R, Fed3RFourier, Fed3RReLU
from redkit.federated.oneshot.fedcof import FedCOF, fedcof_covariance
from redkit.federated.oneshot.fedncm import FedNCM
from redkit.federated.oneshot.maps import FeatureMap, FourierFeatures, ReLUFeatures

__all__ = [
    "ONESHOT",
    "FeatureMap",
    "Fed3R",
    "Fed3RFourier",
    "Fed3RReLU",
    "FedCOF",
    "FedNCM",
    "FourierFeatures",
    "OneShotClassifier",
    "OneShotMethod",
    "ReLUFeatures",
    "Upload",
    "as_wire",
    "compact_bytes",
    "fedcof_covariance",
    "upload_bytes",
]
