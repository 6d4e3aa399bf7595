"""The step decomposer: numbers copied from every phrasing, targets that recover the gold program,
decoding that is always a well-formed program, and a tiny train -> save -> load round trip."""

import json
import random
import shutil

import pytest
import torch

from redkit.errors import RedkitError
from redkit.train.loop import TrainConfig
from redkit_experiments.arithmetic.expression import Expression
from redkit_experiments.arithmetic.phrasing import STYLES
from redkit_experiments.arithmetic.programs import parse_program, program_from_expression, render_program
from redkit_experiments.decomposer import (
    DecomposerConfig,
    StepDecomposer,
    alignment,
    decode,
    extract_numbers,
    load_decomposer,
    number_positions,
    train_decomposer,
)


def _random_chains(count: int, seed: int = 0, operators: str = "+-*") -> list[Expression]:
    rng = random.Random(seed)
    chains = []
    for _ in range(count):
        n = rng.randint(2, 5)
        chains.append(
            Expression(tuple(rng.randint(0, 150) for _ in range(n)), tuple(rng.choice(operators) for _ in range(n - 1)))
        )
    return chains


def test_numbers_are_extracted_in_text_order():
    assert extract_numbers("Calculate 48 - 44 + 29 - 14.") == [48, 44, 29, 14]
    assert extract_numbers("Subtract 5 from the result of 35 plus 17 minus 22 plus 25.") == [5, 35, 17, 22, 25]
    assert extract_numbers("If you subtract 5 from 12 and add 9, what do you get?") == [5, 12, 9]
    assert extract_numbers("What is 007 plus 3?") == [7, 3]
    assert extract_numbers("no numbers here") == []


@pytest.mark.parametrize("style", sorted(STYLES))
def test_every_phrasing_holds_exactly_the_operands_and_alignment_recovers_the_program(style):
    for expr in _random_chains(200, seed=sorted(STYLES).index(style)):
        text = STYLES[style](expr.operands, expr.operators)
        assert sorted(extract_numbers(text)) == sorted(expr.operands), text
        gold = program_from_expression(expr)
        slots_ops = alignment(text, gold, ("+", "-", "*"))
        # the targets, decoded as if predicted perfectly, give back the gold program exactly
        order = [float(slot) for slot, _ in slots_ops]
        logits = [[1.0 if k == op else 0.0 for k in range(3)] for _, op in slots_ops]
        assert decode(extract_numbers(text), order, logits, ("+", "-", "*")) == gold, text


def test_reordering_phrasings_are_aligned_by_the_phrasing_not_by_value():
    # "If you subtract 12 from 12 and add 12": values alone cannot say which 12 comes first
    text = STYLES["if_you"]((12, 12, 12), ("-", "+"))
    assert alignment(text, "Step 1: 12 - 12 = x1\nStep 2: x1 + 12 = x2\nAnswer: x2", ("+", "-")) == [
        (1, 1),
        (0, -100),
        (2, 0),
    ]
    text = STYLES["result_of"]((35, 17, 5), ("+", "-"))
    assert text == "Subtract 5 from the result of 35 plus 17."
    assert [
        slot for slot, _ in alignment(text, "Step 1: 35 + 17 = x1\nStep 2: x1 - 5 = x2\nAnswer: x2", ("+", "-"))
    ] == [2, 0, 1]


def test_alignment_refuses_numbers_that_are_not_the_programs():
    with pytest.raises(RedkitError, match="not the program's operands"):
        alignment("What is 3 plus 4?", "Step 1: 3 + 5 = x1\nAnswer: x1", ("+", "-"))
    with pytest.raises(RedkitError, match="does not predict"):
        alignment("What is 3 times 4?", "Step 1: 3 * 4 = x1\nAnswer: x1", ("+", "-"))


def test_constrained_decoding_always_yields_a_well_formed_program_on_random_scores():
    gen = torch.Generator().manual_seed(0)
    rng = random.Random(0)
    for trial in range(2000):
        n = rng.randint(2, 9)
        operators = rng.choice([("+", "-"), ("+", "-", "*"), ("-",)])
        values = [rng.randint(0, 200) for _ in range(n)]
        scale = rng.choice([1e-3, 1.0, 1e3])
        order = (torch.randn(n + rng.randint(0, 3), generator=gen) * scale).tolist()  # padded rows may follow
        if trial % 7 == 0:
            order = [0.0] * len(order)  # all tied: text order
        logits = (torch.randn(len(order), len(operators), generator=gen) * scale).tolist()
        program = decode(values, order, logits, operators)
        text = render_program(program)
        assert parse_program(text) == program and render_program(parse_program(text)) == text
        assert program.num_steps == n - 1 and program.answer_var == f"x{n - 1}"
        literals = [program.steps[0].left] + [step.right for step in program.steps]
        assert sorted(literals) == sorted(values)  # every number used exactly once, nothing else
        assert all(step.left == f"x{k}" for k, step in enumerate(program.steps[1:], start=1))
        assert all(step.op in operators for step in program.steps)


def test_decoding_needs_two_numbers():
    with pytest.raises(RedkitError, match="at least 2"):
        decode([7], [0.0], [[0.0, 1.0]], ("+", "-"))


# ---- a tiny training run (embedded backbone, ~300 examples, 2 epochs) -------------------------------


@pytest.fixture(scope="module")
def tiny_decomposer(tmp_path_factory):
    out = tmp_path_factory.mktemp("decomposer")
    config = DecomposerConfig(
        n=400,
        max_train=300,
        max_val=40,
        train=TrainConfig(lr=1e-3, batch_size=32, virtual_batch_size=32, max_epochs=2, patience=2),
    )
    metrics = train_decomposer(out, config, print_fn=lambda line: None)
    return out, metrics


def test_tiny_run_writes_a_module_and_metrics(tiny_decomposer):
    out, metrics = tiny_decomposer
    assert (out / "module" / "config.json").is_file() and (out / "module" / "model.safetensors").is_file()
    assert not (out / "module" / "checkpoint.json").exists()
    meta = json.loads((out / "module" / "config.json").read_text())
    assert meta["kind"] == "decomposer" and meta["backbone_fingerprint"] == metrics["backbone_fingerprint"]
    saved = json.loads((out / "metrics.json").read_text())
    for split in ("test", "test_heldout_templates"):
        result = saved["splits"][split]
        assert 0.0 <= result["exact_match"] <= 1.0 and result["count"] > 0
        assert set(result["by_num_steps"]) <= {"2", "3", "4"}


def test_tiny_model_predicts_valid_programs_and_survives_save_and_load(tiny_decomposer):
    out, _ = tiny_decomposer
    model = load_decomposer(out)
    texts = [
        STYLES[style](expr.operands, expr.operators)
        for style in sorted(STYLES)
        for expr in _random_chains(3, seed=1, operators="+-")
    ]
    texts += ["What is 3 plus 4 plus 5 plus 6 plus 7 plus 8 plus 9 plus 10 plus 11?"]  # longer than any training text
    programs = model.predict(texts)
    for text, program in zip(texts, programs):
        literals = [program.steps[0].left] + [step.right for step in program.steps]
        assert sorted(literals) == sorted(extract_numbers(text))
        assert parse_program(render_program(program)) == program
    again = StepDecomposer.load(out / "module", model.backbone)
    assert [render_program(p) for p in again.predict(texts)] == [render_program(p) for p in programs]
    assert model.decompose(texts[0]) == render_program(programs[0])
    with pytest.raises(RedkitError, match="at least 2"):
        model.predict(["What is 5?"])


def test_number_positions_point_at_the_digits(tiny_decomposer):
    out, _ = tiny_decomposer
    backbone = load_decomposer(out).backbone
    text = "Subtract 5 from the result of 35 plus 17 minus 150 plus 25."
    enc = backbone.tokenize([text])
    tokens = backbone.tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    spans = number_positions(backbone, [text])[0]
    assert ["".join(t.lstrip("#") for t in tokens[a : b + 1]) for a, b in spans] == ["5", "35", "17", "150", "25"]


def _copy_with(out, tmp_path, field: str, value: str):
    """A copy of the trained module whose config.json says `field: value`."""
    module = tmp_path / "module"
    shutil.copytree(out / "module", module)
    meta = json.loads((module / "config.json").read_text())
    meta[field] = value
    (module / "config.json").write_text(json.dumps(meta))
    return module


def test_loading_refuses_another_backbone(tiny_decomposer, tmp_path):
    out, _ = tiny_decomposer
    module = _copy_with(out, tmp_path, "backbone_fingerprint", "0123456789abcdef")
    with pytest.raises(RedkitError, match="trained on backbone 0123456789abcdef"):
        StepDecomposer.load(module)
    from redkit.backbone import Backbone, BackboneConfig

    other_split = Backbone(BackboneConfig(trainable_layers=1))  # same weights, another split: another fingerprint
    with pytest.raises(RedkitError, match="retrain it for this backbone"):
        StepDecomposer.load(out / "module", other_split)


def test_loading_refuses_another_module_kind(tiny_decomposer, tmp_path):
    out, _ = tiny_decomposer
    module = _copy_with(out, tmp_path, "kind", "router")
    with pytest.raises(RedkitError, match="not a decomposer"):
        StepDecomposer.load(module)


@pytest.mark.slow
def test_tuning_the_top_layers_saves_them_with_the_head_and_keeps_the_source_fingerprint(tmp_path):
    config = DecomposerConfig(
        n=200,
        max_train=64,
        max_val=16,
        tune_top=True,
        train=TrainConfig(lr=1e-3, batch_size=32, virtual_batch_size=32, max_epochs=1, patience=1),
    )
    metrics = train_decomposer(tmp_path, config, print_fn=lambda line: None)
    meta = json.loads((tmp_path / "module" / "config.json").read_text())
    assert meta["config"]["tuned_top"] is True
    model = load_decomposer(tmp_path)  # a fresh backbone with the source weights, then the tuned top on it
    assert meta["backbone_fingerprint"] == metrics["backbone_fingerprint"] != model.backbone.fingerprint()
    texts = [STYLES["if_you"]((12, 5, 9), ("-", "+")), STYLES["result_of"]((3, 4, 5, 6), ("+", "-", "+"))]
    again = load_decomposer(tmp_path)
    assert [render_program(p) for p in model.predict(texts)] == [render_program(p) for p in again.predict(texts)]


@pytest.mark.slow
def test_a_decoder_backbone_also_yields_valid_programs(tmp_path):
    from test_backbone import make_tiny_qwen3

    from redkit.backbone import Backbone, BackboneConfig
    from redkit_experiments.decomposer import DecomposerHead, HeadConfig

    backbone = Backbone(BackboneConfig(path=str(make_tiny_qwen3(tmp_path / "qwen3"))))
    model = StepDecomposer(backbone, DecomposerHead(HeadConfig(dim=backbone.hidden_size)))
    model.save(tmp_path / "module", backbone.fingerprint())
    texts = ["If you subtract 5 from 12 and add 9, what do you get?", "Calculate 48 - 44 + 29 - 14."]
    for text, program in zip(texts, StepDecomposer.load(tmp_path / "module", backbone).predict(texts)):
        assert sorted([program.steps[0].left] + [s.right for s in program.steps]) == sorted(extract_numbers(text))
