"""The expert kind `lora`: one peft LoRA adapter per domain on the linear modules of the backbone's
trainable top-N layers, with the shared classifier C outside the adapter and frozen.

    prefix states (B, T, d) ─► top-N layers, each Linear W x + (α/r) B_i A_i x ─► pooling ─► h_i (B, d) ─► C ─► logits

A `LoraBackbone` is a second copy of the run's tuned backbone (peft rewrites its layers in place,
so the run's own backbone and its fingerprint stay untouched) whose Hugging Face model is wrapped by
a peft model holding the K experts. It runs from the frozen-prefix cache like stage base does.

Each expert is saved in peft's own format, `<dir>/adapter_config.json` + `adapter_model.safetensors`
(`PeftModel.from_pretrained(AutoModel.from_pretrained(backbone), dir)` loads it anywhere), beside a
`redkit.json` (a ModuleMeta: backbone fingerprint, domain, seed, metrics) that redkit checks on load.
"""

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn

from redkit.atomic import write_json
from redkit.backbone import Backbone
from redkit.errors import RedkitError
from redkit.modules.store import ModuleMeta, check_fingerprint, parse_meta
from redkit.train.loop import TrainConfig
from redkit_experiments.peers import require_peft

META = "redkit.json"
ADAPTER_CONFIG, ADAPTER_WEIGHTS = "adapter_config.json", "adapter_model.safetensors"


@dataclass
class LoraExpertConfig:
    rank: int = 8  # r; rank 8 on the 12 linear modules of MiniLM's top 2 layers = 110,592 parameters per expert
    alpha: int = 16  # lora_alpha; the update is scaled by alpha / rank
    dropout: float = 0.0
    targets: tuple[str, ...] = ()  # name suffixes of the top layers' Linear modules to adapt; () = every one
    examples: int = 4000  # training examples per expert (a seeded sample of its domain), 0 = all
    val_examples: int = 500  # validation examples per expert (early stopping), 0 = all
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(lr=1e-3, batch_size=64, virtual_batch_size=64, max_epochs=8, patience=2)
    )

    def __post_init__(self) -> None:
        if self.rank < 1:
            raise RedkitError(f"--lora-rank must be at least 1, not {self.rank}")
        if self.examples < 0 or self.val_examples < 0:
            raise RedkitError("--examples-per-expert and --val-per-expert must be >= 0 (0 = all)")


def top_linear_names(backbone: Backbone) -> list[str]:
    """Names (in the Hugging Face model) of the Linear modules of the trainable top layers, e.g.
    `encoder.layer.4.attention.self.query` (before any adapter: LoRA layers hold Linears of their own)."""
    wanted = {id(m) for layer in backbone.top_layers for m in layer.modules() if isinstance(m, nn.Linear)}
    return [name for name, m in backbone.model.named_modules() if id(m) in wanted]


def select_targets(names: list[str], targets: tuple[str, ...]) -> list[str]:
    """The names among `names` ending in one of `targets` (all of them for no targets)."""
    if targets:
        names = [n for n in names if any(n == t or n.endswith("." + t) for t in targets)]
        if not names:
            raise RedkitError(f"--lora-targets {','.join(targets)}: no Linear module of the top layers has such a name")
    return names


class LoraBackbone:
    """The run's tuned backbone, in a copy of its own, with a peft model wrapped around its HF model."""

    def __init__(self, run):
        require_peft()
        from redkit.run import open_run

        self.run = run
        self.backbone: Backbone = open_run(run.dir).backbone  # a fresh instance: peft edits layers in place
        self.fingerprint = self.backbone.fingerprint()  # of the features, taken before any adapter is added
        self.base_model = self.backbone.model  # the Hugging Face model itself
        self.top_linears = top_linear_names(self.backbone)
        self.peft = None  # the peft model, once the first adapter is in

    def wrap(self, peft_model) -> None:
        """Route the backbone's calls through `peft_model` (so `adapter_names=` etc. reach it)."""
        self.peft = peft_model.eval()
        self.backbone.model = peft_model

    @property
    def adapters(self) -> list[str]:
        return list(self.peft.peft_config) if self.peft is not None else []

    def add(self, name: str, config: LoraExpertConfig) -> None:
        """A fresh adapter `name` (B = 0, so it starts as the identity), active and the only trainable one."""
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(
            r=config.rank,
            lora_alpha=config.alpha,
            lora_dropout=config.dropout,
            task_type=None,
            target_modules=select_targets(self.top_linears, config.targets),
        )
        if self.peft is None:
            self.wrap(get_peft_model(self.base_model, lora, adapter_name=name))
        else:
            self.peft.add_adapter(name, lora)
        self.train_only(name)

    def train_only(self, name: str) -> None:
        self.peft.set_adapter(name)
        for pname, param in self.peft.named_parameters():
            param.requires_grad = f".{name}." in pname and ".lora_" in pname

    def load(self, directory: Path, name: str) -> ModuleMeta:
        """Load the expert saved in `directory` as adapter `name`, after checking its backbone."""
        meta = read_lora_meta(directory)
        check_fingerprint(directory, meta, self.fingerprint)
        from peft import PeftModel

        if self.peft is None:
            self.wrap(PeftModel.from_pretrained(self.base_model, str(directory), adapter_name=name))
        else:
            self.peft.load_adapter(str(directory), adapter_name=name)
        self.peft.eval()
        return meta

    def save(self, root: Path, name: str, meta: ModuleMeta) -> Path:
        """peft's format in `root/name/`, then redkit.json (last: a directory with it is complete)."""
        self.peft.save_pretrained(str(root), selected_adapters=[name])
        write_json(root / name / META, asdict(meta))
        return root / name

    def parameters_of(self, name: str) -> int:
        return sum(p.numel() for pname, p in self.peft.named_parameters() if f".{name}." in pname and ".lora_" in pname)

    def features(self, batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor], **peft_kwargs) -> torch.Tensor:
        """(ids, mask, prefix states) -> h (B, d) through the adapted top layers."""
        return self.backbone(*batch, **peft_kwargs)


def lora_expert_exists(directory: Path) -> bool:
    return all((directory / f).is_file() for f in (META, ADAPTER_CONFIG, ADAPTER_WEIGHTS))


def read_lora_meta(directory: Path) -> ModuleMeta:
    if not lora_expert_exists(directory):
        raise RedkitError(f"{directory}: no LoRA expert here (expected {META}, {ADAPTER_CONFIG} and {ADAPTER_WEIGHTS})")
    return parse_meta(directory / META)


def adapter_shape(directory: Path) -> tuple[int, tuple[str, ...]]:
    """(rank, sorted target modules) of a saved adapter, from peft's own config."""
    config = json.loads((directory / ADAPTER_CONFIG).read_text())
    return int(config["r"]), tuple(sorted(config["target_modules"]))
