"""A run on texts: a Hugging Face backbone whose top layers stage base tunes, and the pooled
features of every split through it, cached (the kinds: your labelled text, Task 1/2, steps)."""

from functools import cached_property

import torch

from redkit.backbone import Backbone
from redkit.errors import RedkitError
from redkit.features import cached_features, text_hash
from redkit.modules.store import load_state, module_exists
from redkit.run.base import Run
from redkit.run.config import TextConfig


class TextRun(Run):
    config_class: type[TextConfig] = TextConfig
    # Its texts are answered by one composition over the backbone's features, so `redkit export` writes
    # that path as one ONNX graph for serving (redkit/bundle/graph.py); a kind that answers otherwise says no.
    servable: bool = True

    @cached_property
    def backbone(self) -> Backbone:
        """The backbone, with its tuned top layers once stage base has produced them."""
        backbone = Backbone(self.config.backbone)
        top = self.module_dir("backbone_top")
        if module_exists(top):
            state, meta = load_state(top)
            if meta.config.get("source_fingerprint") != backbone.source_fingerprint:
                raise RedkitError(
                    f"{top}: tuned for backbone {meta.config.get('source_fingerprint')}, "
                    f"but --backbone {backbone.path} is {backbone.source_fingerprint}"
                )
            try:
                backbone.load_top_state_dict(state)
            except RuntimeError as err:  # a hand-edited or foreign file: missing or misshapen tensors
                raise RedkitError(
                    f"{top}: weights do not fit this backbone's top layers ({str(err).splitlines()[0]})"
                ) from None
        return backbone.to(self.device)

    @cached_property
    def encoder(self):
        """What queries are read with: the backbone, or in a run of tuned owners the backbone with every owner's top
        layers beside its own (redkit/fitting/tuned_encoder.py: features [r, z_1, …, z_K])."""
        from redkit.fitting.replay_free import has_tuned_owners

        if not has_tuned_owners(self.config):
            return self.backbone
        from redkit.fitting.tuned_encoder import TunedEncoder

        return TunedEncoder.from_run(self)

    @cached_property
    def fingerprint(self) -> str:
        """Of the features modules are trained on: the tuned backbone's."""
        return self.backbone.fingerprint()

    @property
    def feature_dim(self) -> int:
        return self.backbone.hidden_size

    @cached_property
    def data_hash(self) -> str:
        return text_hash([ex.question for ex in self.splits["train"]])

    def features(self, name: str, examples: list) -> torch.Tensor:
        """(N, d) pooled features of `examples` with the tuned backbone (cached)."""
        return self.text_features(name, [ex.question for ex in examples])

    def text_features(self, name: str, texts: list[str]) -> torch.Tensor:
        """(N, d) pooled features of bare texts (out-of-scope queries have no label) with the tuned backbone (cached);
        (N, 2d + K d) in a run of tuned owners (`encoder`)."""
        if not module_exists(self.module_dir("backbone_top")):
            raise RedkitError(
                f"{self.module_dir('backbone_top')}: missing; stage base has not run yet, so there is no tuned backbone"
            )
        return cached_features(self.cache_dir, self.encoder, texts, name, reuse_prefix=self.reuse_prefix)

    def split_tensors(self, name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(h (N, d), classes (N,), domain labels (N,)) of a split."""
        examples = self.splits[name]
        return (
            self.features(name, examples),
            self.classes(examples),
            torch.tensor([self.domain_label(ex) for ex in examples]),
        )
