"""The backbone split: frozen prefix + trainable top computes exactly the full model, for the
embedded encoder and for a decoder (a tiny randomly initialised Qwen3 saved to a temp dir)."""

import shutil

import pytest
import torch

from redkit.backbone import Backbone, BackboneConfig, default_backbone_path
from redkit.errors import RedkitError

TEXTS = ["What is 12 plus 27?", "Add 3 and 4.", "If you add 5 to 40, what do you get?"]


def make_tiny_qwen3(directory):
    """A 3-layer Qwen3 with random weights; it borrows the embedded model's tokenizer files."""
    from transformers import Qwen3Config, Qwen3Model

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=30522,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=128,
    )
    Qwen3Model(config).save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(default_backbone_path() / name, directory / name)
    return directory


@pytest.fixture(scope="module")
def minilm():
    return Backbone(BackboneConfig())


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory):
    return make_tiny_qwen3(tmp_path_factory.mktemp("qwen3"))


def _split_equals_full(backbone: Backbone):
    enc = backbone.tokenize(TEXTS)
    with torch.no_grad():
        full = backbone.model(**enc).last_hidden_state
        split = backbone.run_top(enc["input_ids"], enc["attention_mask"], backbone.run_prefix(**enc))
    mask = enc["attention_mask"].bool()
    assert torch.allclose(full[mask], split[mask], atol=1e-5)


def test_minilm_split_is_exact(minilm):
    assert minilm.hidden_size == 384 and minilm.split_at == 4
    _split_equals_full(minilm)


@pytest.mark.parametrize("trainable", [1, 2])
def test_qwen3_split_is_exact(tiny_qwen3, trainable):
    backbone = Backbone(BackboneConfig(path=str(tiny_qwen3), trainable_layers=trainable))
    assert backbone.hidden_size == 64 and backbone.split_at == 3 - trainable
    _split_equals_full(backbone)


def test_only_the_top_layers_are_trainable(minilm):
    trainable = {n for n, p in minilm.model.named_parameters() if p.requires_grad}
    assert trainable and all(".layer.4." in n or ".layer.5." in n for n in trainable)


@pytest.mark.parametrize("pooling", ["mean", "last", "cls"])
def test_poolings_differ_and_ignore_padding(tiny_qwen3, pooling):
    backbone = Backbone(BackboneConfig(path=str(tiny_qwen3), pooling=pooling))
    with torch.no_grad():
        batch = backbone(**backbone.tokenize(TEXTS))
        alone = backbone(**backbone.tokenize(TEXTS[:1]))
    assert batch.shape == (3, 64)
    assert torch.allclose(batch[0], alone[0], atol=1e-5)  # padding of the longer texts changes nothing


def test_fingerprint_tracks_the_tuned_top(minilm):
    before = minilm.fingerprint()
    state = {k: v.clone() for k, v in minilm.top_state_dict().items()}
    changed = {k: v + 0.01 if v.is_floating_point() else v for k, v in state.items()}
    minilm.load_top_state_dict(changed)
    assert minilm.fingerprint() != before
    minilm.load_top_state_dict(state)
    assert minilm.fingerprint() == before


@pytest.mark.slow
def test_not_a_model_directory_is_one_clear_error(tmp_path):
    with pytest.raises(RedkitError, match="no config.json"):
        Backbone(BackboneConfig(path=str(tmp_path)))
    with pytest.raises(RedkitError, match="not a directory"):
        Backbone(BackboneConfig(path=str(tmp_path / "nope")))
    for bad in (0, 7):  # 6 = every layer of the 6-layer MiniLM
        with pytest.raises(RedkitError, match="trainable_layers"):
            Backbone(BackboneConfig(trainable_layers=bad))
