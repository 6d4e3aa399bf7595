"""Each trained module is its own directory: `config.json` + `model.safetensors`, never a pickle.

`config.json` says what the module is (kind and dimensions), what it was trained on (domain,
backbone fingerprint, data hash, seed), with which redkit, and how well it did. Loading checks
the backbone fingerprint and the dimensions and refuses a mismatch with one clear line: a module
trained on another backbone's features would silently compute nonsense.
"""

import hashlib
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from redkit.atomic import atomic_path, write_json
from redkit.config_types import check_config_types
from redkit.errors import RedkitError
from redkit.jsonfile import read_json
from redkit.modules.layers import MODULES

CONFIG, WEIGHTS = "config.json", "model.safetensors"


@dataclass
class ModuleMeta:
    kind: str  # a MODULES name, or "backbone_top"
    config: dict  # the module's dataclass config (dimensions)
    backbone_fingerprint: str  # features it was trained on
    data_hash: str = ""
    seed: int = 0
    domain: int | None = None  # the domain an expert was trained on (its index)
    redkit_version: str = ""
    metrics: dict = field(default_factory=dict)


def module_exists(path: str | Path) -> bool:
    path = Path(path)
    return (path / CONFIG).is_file() and (path / WEIGHTS).is_file()


def save_module(path: str | Path, state: dict[str, torch.Tensor] | nn.Module, meta: ModuleMeta) -> None:
    """Weights first, config last: a directory with a config.json is a complete module."""
    from redkit import __version__

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if isinstance(state, nn.Module):
        state = state.state_dict()
    meta.redkit_version = meta.redkit_version or __version__
    with atomic_path(path / WEIGHTS) as tmp:
        save_file({k: v.detach().contiguous().cpu() for k, v in state.items()}, str(tmp))
    write_json(path / CONFIG, asdict(meta))


def read_meta(path: str | Path) -> ModuleMeta:
    path = Path(path)
    if not module_exists(path):
        raise RedkitError(f"{path}: no trained module here (expected {CONFIG} and {WEIGHTS})")
    return parse_meta(path / CONFIG)


def parse_meta(file: Path) -> ModuleMeta:
    """A module's JSON config -> ModuleMeta; anything else is one clear error naming the file."""
    raw = read_json(file, "a redkit module config")
    try:
        meta = ModuleMeta(**raw)
    except TypeError as err:
        raise RedkitError(f"{file}: not a redkit module config ({str(err).splitlines()[0]})") from None
    # Each field's type, checked once here: a hand-edited config with "config": [] or a numeric
    # kind would otherwise fail later, far from the file, with an AttributeError.
    for name, types in (("kind", str), ("config", dict), ("backbone_fingerprint", str), ("metrics", dict)):
        if not isinstance(getattr(meta, name), types):
            raise RedkitError(f"{file}: field '{name}' must be a {types.__name__}, got {getattr(meta, name)!r:.60}")
    return meta


def read_weights(file: Path) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors; a file cut short or not safetensors at all, and weights that are
    NaN or infinite (a diverged training, a corrupted copy), are one line naming the file: loaded,
    they would only surface as every prediction silently becoming class 0."""
    try:
        state = load_file(str(file))
    except (SafetensorError, OSError) as err:
        raise RedkitError(
            f"{file}: not a readable safetensors file, truncated or corrupted ({err}); re-export or retrain this module"
        ) from None
    for name, tensor in state.items():
        # The sum is finite when every entry is (10x cheaper than isfinite over the tensor); only a
        # non-finite sum, which large finite weights can also give, needs the entry-wise check.
        if tensor.is_floating_point() and not torch.isfinite(tensor.sum()) and not bool(torch.isfinite(tensor).all()):
            raise RedkitError(f"{file}: tensor {name!r} holds NaN or infinite values; retrain this module")
    return state


def check_fingerprint(path: str | Path, meta: ModuleMeta, fingerprint: str | None) -> None:
    """Refuse a module trained on another backbone's features (None: no check)."""
    if fingerprint is not None and meta.backbone_fingerprint != fingerprint:
        raise RedkitError(
            f"{path}: this {meta.kind} module was trained on backbone {meta.backbone_fingerprint}, "
            f"but the run's backbone is {fingerprint}; retrain it for this backbone"
        )


def load_state(path: str | Path, fingerprint: str | None = None) -> tuple[dict[str, torch.Tensor], ModuleMeta]:
    path = Path(path)
    meta = read_meta(path)
    check_fingerprint(path, meta, fingerprint)
    return read_weights(path / WEIGHTS), meta


def load_module(
    path: str | Path, fingerprint: str | None = None, dim: int | None = None
) -> tuple[nn.Module, ModuleMeta]:
    """Rebuild a module from its directory, refusing another backbone's or another width's."""
    state, meta = load_state(path, fingerprint)
    if dim is not None and meta.config.get("dim") != dim:
        raise RedkitError(
            f"{path}: module expects features of width {meta.config.get('dim')}, the backbone gives {dim}"
        )
    cls = MODULES[meta.kind]
    try:
        config = cls.Config(**meta.config)
        check_config_types(config, str(path / CONFIG))  # its numbers too (scripts/fuzz_cli.py: a temperature of
        # -10**40 reached torch as an int and raised OverflowError)
        module = cls(config)
    except (TypeError, ValueError) as err:
        raise RedkitError(
            f"{path / CONFIG}: field 'config' does not describe a {meta.kind} ({str(err).splitlines()[0]})"
        ) from None
    try:
        module.load_state_dict(state)
    except RuntimeError as err:
        raise RedkitError(
            f"{path / WEIGHTS}: weights do not fit a {meta.kind} of {meta.config} ({str(err).splitlines()[0]})"
        ) from None
    return module.eval(), meta


def install_module(staging: Path, target: Path) -> None:
    """Move the complete module at `staging` into `target`, replacing whatever is there (an incomplete
    module, or a complete one being retrained). Each step is one rename, so `target` is only ever the
    old module, absent for an instant, or the new one, never a mix of the two's files; an old module set
    aside is removed last (a kill before then leaves it as `.<name>.old`, removed by the next install)."""
    staging, target = Path(staging), Path(target)
    old = target.with_name(f".{target.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    staging.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def retrain_dir(directory: Path) -> Path:
    """Where a module that exists at `directory` is trained again (its checkpoints too, so an interrupted
    retraining resumes), before `install_module` puts it in place of the old one."""
    directory = Path(directory)
    return directory.with_name(f".{directory.name}.retrain")


def module_digest(directory: Path) -> str:
    """sha256 of a module's weights: equal digests, equal modules."""
    return hashlib.sha256((Path(directory) / WEIGHTS).read_bytes()).hexdigest()


def copy_modules(parent, run, parts: list[tuple[str, ...]]) -> dict[str, str]:
    """Copy the modules `parts` (paths under modules/) of run `parent` into `run` (unless already
    there: a resumed derivation) and return the sha256 of each parent module's weights, by path.
    Each copy is written beside its place and renamed into it, so a kill mid-copy leaves no
    half-copied module that a resumed run would trust."""
    for p in parts:
        if not module_exists(parent.module_dir(*p)):
            raise RedkitError(f"{parent.module_dir(*p)}: missing; finish the parent run first")
        target = Path(run.module_dir(*p))
        if not module_exists(target):
            staging = target.with_name(f".{target.name}.copying")
            shutil.rmtree(staging, ignore_errors=True)
            shutil.copytree(parent.module_dir(*p), staging)
            install_module(staging, target)
    return {"/".join(p): module_digest(parent.module_dir(*p)) for p in parts}


def modules_unchanged(run, digests: dict[str, str]) -> bool:
    """Whether every module of `digests` (from copy_modules) still has the same weights in `run`."""
    return all(module_digest(run.module_dir(*p.split("/"))) == d for p, d in digests.items())
