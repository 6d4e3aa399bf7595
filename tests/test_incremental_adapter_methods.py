"""The adapter baselines of the incremental study (methods/adapter.py, prototypes.py, aper.py, ease.py): a new
adapter leaves the backbone as it was, APER's features and prototypes, RanPAC's first-session adaptation, and
EASE's complement and logits against independent computations on hand-made prototypes."""

import pytest
import torch
from torch.nn import functional as F

from redkit.fitting.topics import write_clinc_format
from redkit_experiments.incremental.methods import METHODS
from redkit_experiments.incremental.methods.adapter import Adapter, adapted_features, frozen_backbone
from redkit_experiments.incremental.methods.ease import complement, ease_logits
from redkit_experiments.incremental.study import IncrementalConfig, StudyContext


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    """The study's own machinery on the tiny generated set (three domains of three classes), one epoch a step."""
    tmp = tmp_path_factory.mktemp("inc-adapters")
    data = write_clinc_format(tmp / "data")
    return StudyContext(IncrementalConfig(data_dir=str(data), epochs_per_step=1), tmp / "ctx")


def _state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items()}


@pytest.mark.slow
def test_a_new_adapter_leaves_the_backbone_as_it_was(context):
    backbone = frozen_backbone(context.setting)
    examples = context.step_data(0).train
    torch.manual_seed(0)
    adapter = Adapter.for_backbone(backbone)
    h = adapted_features(backbone, [adapter, None], examples)  # (N, 2, d)
    assert torch.allclose(h[:, 0], examples.features, atol=1e-5)  # the zero up-projection: the frozen features
    assert torch.allclose(h[:, 1], examples.features, atol=1e-5)
    with torch.no_grad():
        adapter[-1].up.weight.normal_()  # a trained adapter moves them, and only while attached
    moved = adapted_features(backbone, [adapter, None], examples)
    assert (moved[:, 0] - examples.features).abs().max() > 1e-2
    assert torch.allclose(moved[:, 1], examples.features, atol=1e-5)
    assert not any(p.requires_grad for p in backbone.parameters())


@pytest.mark.slow
def test_aper_concatenates_the_pretrained_and_adapted_features_and_keeps_class_means(context):
    aper = METHODS["aper"](context.setting)
    step0, step1 = context.step_data(0), context.step_data(1)
    aper.learn(step0)
    adapter = _state(aper.first.adapter)
    aper.learn(step1)
    assert all(torch.equal(v, aper.first.adapter.state_dict()[k]) for k, v in adapter.items())  # frozen after step 0
    train = step1.train
    h = aper.embed(train)
    through = adapted_features(aper.first.backbone, [aper.first.adapter], train)[:, 0]
    assert torch.allclose(h, torch.cat([train.features, through], dim=1))
    for c in step1.classes:
        assert torch.allclose(aper.prototypes[c], h[train.classes == c].mean(dim=0), atol=1e-6)
    queries = context.queries("test")
    scores = aper.scores(queries)
    expected = F.normalize(aper.embed(queries), dim=-1) @ F.normalize(aper.prototypes, dim=-1).T
    seen = list(step0.classes + step1.classes)
    assert torch.allclose(scores[:, seen], expected[:, seen], atol=1e-6)
    assert torch.isinf(scores[:, list(context.step_data(2).classes)]).all()
    assert aper.kept().statistics_bytes == len(seen) * 2 * context.setting.dim * 4


@pytest.mark.slow
def test_simplecil_is_class_means_of_the_frozen_features_by_cosine(context):
    simplecil = METHODS["simplecil"](context.setting)
    step = context.step_data(0)
    simplecil.learn(step)
    for c in step.classes:
        mean = step.train.features[step.train.classes == c].mean(dim=0)
        assert torch.allclose(simplecil.prototypes[c], mean, atol=1e-6)


@pytest.mark.slow
def test_ranpac_fsa_embeds_through_the_first_steps_adapter_only(context):
    narrow = type("NarrowRanPACFirstSession", (METHODS["ranpac_fsa"],), {"width": 64})  # M = 10,000 takes a minute
    ranpac = narrow(context.setting)
    step0 = context.step_data(0)
    ranpac.learn(step0)
    adapter = ranpac.first.adapter
    state = _state(adapter)
    queries = context.queries("test")
    before = ranpac.embed(queries)
    assert torch.allclose(before, adapted_features(ranpac.first.backbone, [adapter], queries)[:, 0])
    assert (before - queries.features).abs().max() > 1e-4  # trained: not the frozen features
    for t in (1, 2):
        ranpac.learn(context.step_data(t))
    assert ranpac.first.adapter is adapter
    assert all(torch.equal(v, adapter.state_dict()[k]) for k, v in state.items())
    assert torch.equal(ranpac.embed(queries), before)


def test_ease_complement_is_the_softmax_weighted_sum_of_the_references():
    g = torch.Generator().manual_seed(0)
    own, refs_old, refs_new = (torch.randn(k, 5, generator=g) for k in (2, 3, 3))
    expected = torch.zeros(2, 5)
    for i in range(2):  # the authors' loops (solve_sim_reset)
        sim = torch.tensor([float(torch.cosine_similarity(own[i], refs_old[j], dim=0)) for j in range(3)])
        w = torch.exp(sim) / torch.exp(sim).sum()
        for j in range(3):
            expected[i] += w[j] * refs_new[j]
    assert torch.allclose(complement(own, refs_old, refs_new), expected, atol=1e-6)


def test_ease_logit_weighs_the_classs_own_subspace_one_and_the_others_alpha_over_t():
    g = torch.Generator().manual_seed(1)
    n, classes, subspaces, d, alpha = 4, 5, 3, 6, 0.1
    features, prototypes = torch.randn(n, subspaces, d, generator=g), torch.randn(classes, subspaces, d, generator=g)
    owner = torch.tensor([0, 0, 1, 2, 2])
    newest = subspaces - 1  # T, the newest step's 0-based index
    expected = torch.zeros(n, classes)
    for x in range(n):
        for c in range(classes):
            for j in range(subspaces):
                cos = float(torch.cosine_similarity(features[x, j], prototypes[c, j], dim=0))
                expected[x, c] += cos if j == owner[c] else alpha / newest * cos
    assert torch.allclose(ease_logits(features, prototypes, owner, alpha), expected, atol=1e-6)
    one = ease_logits(features[:, :1], prototypes[:, :1], torch.zeros(classes, dtype=torch.long), alpha)
    assert torch.allclose(one, F.normalize(features[:, 0], dim=-1) @ F.normalize(prototypes[:, 0], dim=-1).T)


@pytest.mark.slow
def test_ease_learns_real_prototypes_in_every_subspace_and_complements_the_old_ones(context):
    ease = METHODS["ease"](context.setting)
    steps = [context.step_data(t) for t in range(2)]
    for step in steps:
        ease.learn(step)
    old, new = torch.tensor(steps[0].classes), torch.tensor(steps[1].classes)
    train = steps[1].train
    h = adapted_features(ease.backbone, ease.adapters, train)
    for j in range(2):  # step 1's classes: real in subspaces 0 and 1
        for c in new.tolist():
            assert torch.allclose(ease.prototypes[c, j], h[train.classes == c, j].mean(dim=0), atol=1e-6)
    p = ease.prototypes
    assert torch.allclose(p[old, 1], complement(p[old, 0], p[new, 0], p[new, 1]), atol=1e-6)
    queries = context.queries("test")
    scores = ease.scores(queries)
    q = adapted_features(ease.backbone, ease.adapters, queries)
    seen = torch.cat([old, new])
    expected = ease_logits(q, p[seen, :2], ease.owner[seen], 0.1)
    assert torch.allclose(scores[:, seen], expected, atol=1e-6)
    assert torch.isinf(scores[:, list(context.step_data(2).classes)]).all()
    assert ease.kept().statistics_bytes == len(seen) * 2 * context.setting.dim * 4
    assert [a["step"] for a in ease.details()["adapters"]] == [1, 2]
