"""The shared pretrained backbone: any Hugging Face AutoModel directory, split into a frozen
prefix (run once, cached) and a trainable top, with pooling."""

from redkit.backbone.locate import default_backbone_path, fingerprint_files  # noqa: F401
from redkit.backbone.model import POOLINGS, Backbone, BackboneConfig  # noqa: F401
