"""RED as a module: the README's own-loop block runs and RED beats its classifier; the module is the
pipeline's RED (same numbers as the compositions, bit for bit; the stages' losses through it train
the same weights as the code they replaced); parts train alone; save/load round-trips and refuses
what does not fit; the Hugging Face wrapper trains under transformers.Trainer."""

import json
import re
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

import redkit
from redkit.compositions import ModuleSet, compose
from redkit.errors import RedkitError
from redkit.modules.layers import Classifier, HeadExpert, Router
from redkit.red import REDConfig, REDModel, router_loss
from redkit.red.layer import ResidualExpert
from redkit.train.loop import TrainConfig, fit

README = Path(__file__).resolve().parent.parent / "README.md"
D, C, K = 16, 5, 3


def readme_block(heading: str, index: int = 0) -> str:
    """The `index`-th python block of the README section under `heading`."""
    text = README.read_text()
    section = text[text.index(heading) :]
    section = section[: section.find("\n## ", 1)] if "\n## " in section[1:] else section
    return re.findall(r"```python\n(.*?)```", section, re.S)[index]


def test_readme_loop_trains_red_which_beats_its_shared_classifier():
    names: dict = {}
    exec(compile(readme_block("## RED in your own training loop"), "README.md", "exec"), names)
    red = names["red"]
    assert red.training_part == "router" and not any(p.requires_grad for p in red.classifier.parameters())
    assert names["red_accuracy"] > names["base_accuracy"] + 0.2  # measured 0.843 vs 0.390


def _red(router: str = "dense", seed: int = 0) -> REDModel:
    torch.manual_seed(seed)
    return REDModel(REDConfig(dim=D, num_classes=C, domains=("a", "b", "c"), expert_rank=4, router=router))


def test_a_fresh_red_model_is_its_classifier_and_returns_logits_alpha_updates():
    red, h = _red(), torch.randn(7, D)
    out = red(h)
    assert out.logits.shape == (7, C) and out.alpha.shape == (7, K) and out.updates.shape == (7, K, D)
    assert torch.equal(out.logits, red.classifier(h))  # B = 0: untrained experts change nothing
    assert torch.allclose(out.alpha.sum(-1), torch.ones(7))
    assert red.expert_hidden(h).shape == (7, K, D)


def test_forward_is_h_plus_the_alpha_mix_of_expert_updates_through_c():
    red, h = _red(), torch.randn(6, D)
    for expert in red.experts:
        torch.nn.init.normal_(expert.up.weight)
    alpha = torch.softmax(torch.randn(6, K), -1)
    expected = red.classifier(h + sum(alpha[:, i : i + 1] * red.experts[i](h) for i in range(K)))
    assert torch.allclose(red(h, alpha).logits, expected, atol=1e-5)
    one_hot = F.one_hot(torch.tensor([1] * 6), K).float()  # the oracle's α: expert 1 alone
    assert torch.allclose(red(h, one_hot).logits, red.expert_alone_logits(1, h), atol=1e-6)


def test_train_part_trains_that_part_alone():
    red, h, y = _red(), torch.randn(8, D), torch.randint(0, C, (8,))
    params = red.train_part(1)
    assert {id(p) for p in params} == {id(p) for p in red.experts[1].parameters()}
    red.part_loss(1, h, y).backward()
    assert red.experts[1].up.weight.grad is not None
    assert all(p.grad is None for name, p in red.named_parameters() if not name.startswith("experts.1."))
    with pytest.raises(RedkitError, match="unknown RED part"):
        red.train_part(7)
    with pytest.raises(RedkitError, match="trained on domains"):
        red.part_loss("router", h, y)


def _fit(module, loss, h, y):
    """The stages' loop on tiny tensors: what a stage computes, given its loss."""
    config = TrainConfig(lr=1e-2, batch_size=16, virtual_batch_size=32, max_epochs=3, patience=5)
    fit(module, lambda idx: loss(module, h[idx], y[idx]), len(h), lambda: float(loss(module, h, y)), config, seed=3)
    return {k: v.clone() for k, v in module.state_dict().items()}


def test_the_stages_losses_through_red_train_bit_identical_weights_to_the_old_code():
    """The code the stages ran before RED was a module (c09fd17), inlined here, against what they run now."""
    torch.manual_seed(0)
    h, y, d = torch.randn(96, D), torch.randint(0, C, (96,)), torch.randint(0, K, (96,))
    # router: F.cross_entropy(router(h), domain) then; red.router_loss (route(h).logits + aux 0) now
    old, new = Router(Router.Config(D, K)), Router(Router.Config(D, K))
    new.load_state_dict(old.state_dict())
    before = _fit(old, lambda r, x, t: F.cross_entropy(r(x), t), h, d)
    after = _fit(new, router_loss, h, d)
    assert all(torch.equal(before[k], after[k]) for k in before)
    # gate: log_softmax(gate(h)) then; gate.log_weights(gate.route(h)) + aux 0 now
    heads = [HeadExpert(HeadExpert.Config(D, C)).requires_grad_(False) for _ in range(K)]

    def nll(log_w, x, t):
        log_p = torch.stack([F.log_softmax(head(x), dim=-1) for head in heads], dim=1)
        return F.nll_loss(torch.logsumexp(log_w.unsqueeze(-1) + log_p, dim=1), t)

    old, new = Router(Router.Config(D, K)), Router(Router.Config(D, K))
    new.load_state_dict(old.state_dict())
    before = _fit(old, lambda g, x, t: nll(F.log_softmax(g(x), dim=-1), x, t), h, y)

    def routed_nll(g, x, t):
        out = g.route(x)
        return nll(g.log_weights(out), x, t) + out.aux_loss

    after = _fit(new, routed_nll, h, y)
    assert all(torch.equal(before[k], after[k]) for k in before)
    # expert i alone: expert.alone_logits(h, frozen C) then; red.part_loss(i, ...) now
    classifier = Classifier(Classifier.Config(D, C)).requires_grad_(False)
    torch.manual_seed(5)
    old = ResidualExpert(ResidualExpert.Config(D, 4))
    red = REDModel.from_parts(
        classifier, [ResidualExpert(ResidualExpert.Config(D, 4)) for _ in range(K)], ("a", "b", "c")
    )
    red.experts[2].load_state_dict(old.state_dict())
    before = _fit(old, lambda e, x, t: F.cross_entropy(e.alone_logits(x, classifier), t), h, y)
    red.train_part(2)
    after = _fit(red.experts[2], lambda e, x, t: red.part_loss(2, x, t), h, y)
    assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize("router", ["dense", "switch"])
def test_save_and_load_pretrained_round_trip(tmp_path, router):
    red, h = _red(router), torch.randn(5, D)
    for expert in red.experts:
        torch.nn.init.normal_(expert.up.weight)
    red.card = {"backbone_fingerprint": "abc", "metrics": {"test": {"red": {"accuracy": 0.5, "n": 10}}}}
    red.eval().save_pretrained(tmp_path / "m")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["README.md", "config.json", "model.safetensors"]
    assert "| test | red | 10 | 0.5000 |" in (tmp_path / "m" / "README.md").read_text()
    loaded = REDModel.from_pretrained(tmp_path / "m", fingerprint="abc")
    assert loaded.config == red.config and torch.equal(loaded(h).logits, red(h).logits)
    with pytest.raises(RedkitError, match="trained on backbone abc"):
        REDModel.from_pretrained(tmp_path / "m", fingerprint="xyz")


def test_from_pretrained_refuses_a_bad_directory_in_one_line(tmp_path):
    _red().save_pretrained(tmp_path / "m")
    config = tmp_path / "m" / "config.json"
    raw = json.loads(config.read_text())
    raw["config"]["dim"] = 8
    config.write_text(json.dumps(raw))
    with pytest.raises(RedkitError, match="weights do not fit") as err:
        REDModel.from_pretrained(tmp_path / "m")
    assert "\n" not in str(err.value)
    raw["config"]["colour"] = "red"
    config.write_text(json.dumps(raw))
    with pytest.raises(RedkitError, match="unknown RED config field 'colour'"):
        REDModel.from_pretrained(tmp_path / "m")
    with pytest.raises(RedkitError, match="no saved RED model"):
        REDModel.from_pretrained(tmp_path / "nothing")


def test_a_runs_red_model_is_the_red_composition_bit_for_bit(tiny_run):
    from redkit.run import open_run

    run = open_run(tiny_run)
    h, _, domains = run.split_tensors("test")
    red = redkit.load(tiny_run).red_model()
    with torch.no_grad():
        out = red(h)
    for name, alpha in (("red", out.alpha), ("red_oracle", F.one_hot(domains, run.space.num_domains).float())):
        composed = compose(name, ModuleSet(run), h, domains)
        with torch.no_grad():
            assert torch.equal(torch.softmax(red(h, alpha).logits, dim=-1), composed.probs), name
    results = json.loads((tiny_run / "results.json").read_text())
    assert red.card["metrics"]["test"]["red"]["accuracy"] == results["splits"]["test"]["red"]["accuracy"]
    assert red.card["backbone_fingerprint"] == run.fingerprint and red.config.domains == run.space.domains


def test_get_red_model_trains_under_transformers_trainer(tmp_path):
    from transformers import AutoModel, BertConfig, Trainer, TrainingArguments

    torch.manual_seed(0)
    bert = AutoModel.from_config(
        BertConfig(
            vocab_size=50,
            hidden_size=D,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=16,
        )
    )
    model = redkit.get_red_model(bert, REDConfig(dim=D, num_classes=C, domains=("a", "b", "c")))
    frozen = {k: v.clone() for k, v in bert.state_dict().items()}
    rows = [
        {
            "input_ids": torch.randint(0, 50, (6,)),
            "attention_mask": torch.ones(6, dtype=torch.long),
            "labels": torch.tensor(i % C),
        }
        for i in range(16)
    ]
    model.red.train_part("classifier")
    before = model.red.classifier.linear.weight.clone()
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_train_epochs=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        learning_rate=1e-2,
    )
    result = Trainer(model=model, args=args, train_dataset=rows).train()
    assert result.training_loss > 0 and not torch.equal(model.red.classifier.linear.weight, before)
    assert all(torch.equal(frozen[k], v) for k, v in bert.state_dict().items())  # as peft: the base model stays frozen
    with pytest.raises(RedkitError, match="hidden size is 16"):
        redkit.get_red_model(bert, REDConfig(dim=32, num_classes=C, domains=("a",)))
