"""What a run loads from someone else is checked: names that become paths (domains, splits, the paths
a manifest lists), the module folders a bundle may load, a log cut short, and names shown in report.html.
Each refusal is one RedkitError line naming the file (and line or field) and the offending value."""

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import run_cli

from redkit.errors import RedkitError
from redkit.names import RESERVED, check_name


def _one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message and "\r" not in message, message
    return message


# ---- check_name -------------------------------------------------------------------------------------


def test_check_name_returns_a_plain_name_unchanged():
    for name in ("banking", "Bank App", "réservations", "kitchen-2", "a.b", "x" * 128):
        assert check_name(name, "domain") == name


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "is empty"),
        ("../../../../escape", "contains a path separator"),
        ("a\\b", "contains a path separator"),
        (".", "is a directory reference"),
        ("..", "is a directory reference"),
        ("bank\x00", "contains a control character"),
        ("bank\ning", "contains a control character"),
        ("zero\u200bwidth", "contains a control character"),  # Cf: invisible in a listing
        (" banking", "has leading or trailing whitespace"),
        ("banking\t", "contains a control character"),
        ("x" * 129, "is 129 characters long; at most 128"),
        ("global_full", "is reserved"),
        (3, "must be a string"),
    ],
)
def test_check_name_refuses_with_one_line_naming_where_what_and_the_value(name, reason):
    with pytest.raises(RedkitError) as err:
        check_name(name, "domain", "data/train.jsonl:3")
    message = _one_line(err)
    assert message.startswith("data/train.jsonl:3: domain ") and reason in message
    if isinstance(name, str) and len(name) <= 128:
        assert repr(name) in message


def test_reserved_names_are_the_module_folders_and_the_global_heads_names():
    from redkit.compositions import OLD_NAMES

    assert set(OLD_NAMES) <= RESERVED  # the legacy composition names, global_full (a folder) among them
    for folder in ("backbone_top", "classifier", "experts", "heads", "label_rows", "router", "gate", "joint"):
        assert folder in RESERVED and check_name(folder, "module folder", reserved=False) == folder
    assert {"linear_probe", "global_head"} <= RESERVED


# ---- names that become paths: training data, CLINC150, module_dir, expert.json, splits.json ------------


def _train_file(directory: Path, rename: dict[str, str]) -> tuple[Path, int]:
    from redkit.fitting.topics import topic_records

    rows = topic_records(40, 2, 2, seed=1)
    for row in rows:
        row["domain"] = rename.get(row["domain"], row["domain"])
    directory.mkdir(parents=True)
    (directory / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    first = next(i for i, r in enumerate(rows, start=1) if r["domain"] in rename.values())
    return directory / "train.jsonl", first


@pytest.mark.parametrize(
    ("domain", "reason"),
    [("../../../../escape", "contains a path separator"), ("global_full", "is reserved")],
)
def test_fit_refuses_a_domain_that_is_a_path_or_a_module_folder_and_writes_nothing(tmp_path, capsys, domain, reason):
    """Before the check, '../../../../escape' made fit write experts and heads beside the run's parent
    directories and crash with 'stack expects each tensor to be equal size'; 'global_full' would be
    the global head's folder (modules/heads/global_full)."""
    from redkit.fitting.topics import topic_records

    original = sorted({r["domain"] for r in topic_records(40, 2, 2, seed=1)})[0]
    root = tmp_path / "a" / "b" / "c"
    train, line = _train_file(root / "data", {original: domain})
    before = sorted(tmp_path.rglob("*"))
    code, _, err = run_cli(["fit", "--data", root / "data", "--out", root / "run", "--max-epochs", "1"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{train}:{line}: domain {domain!r} {reason}" in err
    assert sorted(tmp_path.rglob("*")) == before  # no run, no module anywhere


def test_clinc150_domains_json_refuses_a_domain_that_is_a_path(tmp_path):
    from redkit.data.clinc150 import read_domains

    path = tmp_path / "domains.json"
    path.write_text(json.dumps({"banking": ["freeze"], "../x": ["weather"]}))
    with pytest.raises(RedkitError) as err:
        read_domains(path)
    assert _one_line(err) == f"{path}: domain '../x' contains a path separator"


def test_module_dir_checks_every_component(tmp_path):
    from redkit.run.base import Run

    run = object.__new__(Run)
    run.dir = tmp_path / "run"
    assert run.module_dir("heads", "global_full") == tmp_path / "run" / "modules" / "heads" / "global_full"
    for parts in (("experts", "residual", "../../../../escape"), ("heads", ".."), ("label_rows", "a\nb")):
        with pytest.raises(RedkitError) as err:
            run.module_dir(*parts)
        assert _one_line(err).startswith(f"{run.dir / 'modules'}: module folder {parts[-1]!r} ")


def _expert(directory: Path, **fields) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    description = {"format": 1, "domains": ["bank_app"], "label_rows": {}, "host": {}, "files": {}} | fields
    (directory / "expert.json").write_text(json.dumps(description))
    return directory


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"domains": ["../../escape"]}, "field 'domains': domain '../../escape' contains a path separator"),
        ({"domains": ["heads"]}, "field 'domains': domain 'heads' is reserved"),
        ({"label_rows": {"a/b": ["x"]}}, "field 'label_rows': domain 'a/b' contains a path separator"),
        ({"domains": "bank_app"}, "field 'domains' must list the new domains"),
        ({"files": {"/etc/passwd": {"size": 1, "sha256": ""}}}, "file path '/etc/passwd' leaves"),
        ({"files": {"modules/../../x": {"size": 1, "sha256": ""}}}, "file path 'modules/../../x' leaves"),
        ({"files": {"modules\\x": {"size": 1, "sha256": ""}}}, "component 'modules\\\\x' contains a path separator"),
    ],
)
def test_an_expert_description_with_a_name_that_is_a_path_is_refused(tmp_path, fields, message):
    from redkit.lifecycle.expert import read_expert

    directory = _expert(tmp_path / "expert", **fields)
    with pytest.raises(RedkitError) as err:
        read_expert(directory, parent=None)  # refused before the run it joins is looked at
    assert _one_line(err).startswith(str(directory / "expert.json")) and message in str(err.value)


def test_an_expert_file_that_links_outside_its_directory_is_refused(tmp_path):
    from redkit.bundle.manifest import file_entry
    from redkit.lifecycle.expert import read_expert

    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"not the expert's")
    directory = tmp_path / "expert"
    (directory / "modules").mkdir(parents=True)
    os.symlink(secret, directory / "modules" / "model.safetensors")
    _expert(directory, files={"modules/model.safetensors": file_entry(secret)})
    with pytest.raises(RedkitError) as err:
        read_expert(directory, parent=None)
    assert "file path 'modules/model.safetensors' leaves expert (through a link)" in _one_line(err)


def test_a_split_name_that_is_a_path_is_refused(tmp_path):
    from redkit.fitting.run import FitRun

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "splits.json").write_text(json.dumps({"splits": {"train": {}, "../../x": {}}, "oos": {}}))
    run = object.__new__(FitRun)
    run.dir = tmp_path
    with pytest.raises(RedkitError) as err:
        _ = run.splits
    assert (
        _one_line(err)
        == f"{tmp_path / 'data' / 'splits.json'}: field 'splits': split '../../x' contains a path separator"
    )


# ---- a bundle loads only what its manifest lists --------------------------------------------------------


def _bundle(root: Path, extra: dict[str, bytes] | None = None) -> Path:
    """A bundle's files (content irrelevant here: the manifest is checked before anything is read)."""
    from redkit.bundle.manifest import MANIFEST, file_entry

    files = {
        "config.json": b'{"task": "fit"}',  # what open_run reads to pick the kind that verifies the bundle
        "modules/router/config.json": b"{}",
        "modules/router/model.safetensors": b"weights",
        "modules/experts/residual/bank/model.safetensors": b"expert",
    } | (extra or {})
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    listing = {name: file_entry(root / name) for name in files}
    (root / MANIFEST).write_text(json.dumps({"format": 1, "files": listing}))
    return root


@pytest.mark.parametrize(
    ("unlisted", "named"),
    [
        ("modules/extra/model.safetensors", "modules/extra"),
        ("modules/experts/residual/other/config.json", "modules/experts/residual/other"),
        ("modules/router/extra.safetensors", "modules/router/extra.safetensors"),
        ("decomposer/module/model.safetensors", "decomposer"),
    ],
)
def test_a_module_the_manifest_does_not_list_is_refused(tmp_path, capsys, unlisted, named):
    from redkit.bundle.manifest import verify_bundle

    bundle = _bundle(tmp_path / "bundle")
    verify_bundle(bundle)  # complete as listed
    (bundle / unlisted).parent.mkdir(parents=True, exist_ok=True)
    (bundle / unlisted).write_bytes(b"planted")
    with pytest.raises(RedkitError) as err:
        verify_bundle(bundle)
    assert _one_line(err) == f"{bundle / named}: not listed in the bundle's manifest.json; refusing to load it"
    code, _, err = run_cli(["predict", "--run", bundle, "some text"], capsys)  # before anything is loaded
    assert (
        code == 2
        and err.strip()
        == f"redkit: error: {bundle / named}: not listed in the bundle's manifest.json; refusing to load it"
    )


def test_a_module_folder_that_links_elsewhere_is_refused(tmp_path):
    from redkit.bundle.manifest import verify_bundle

    bundle = _bundle(tmp_path / "bundle")
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", bundle / "modules" / "gate")
    with pytest.raises(RedkitError, match="modules/gate: not listed in the bundle's manifest.json"):
        verify_bundle(bundle)


@pytest.mark.parametrize("name", ["oos.json", "timings.json", "results.json"])
def test_an_unlisted_oos_or_timings_file_is_refused_and_a_listed_one_verified(tmp_path, name):
    from redkit.bundle.manifest import verify_bundle

    bundle = _bundle(tmp_path / "bundle")
    (bundle / name).write_text('{"red": {"score": "msp", "threshold": 2.0}}')
    with pytest.raises(RedkitError) as err:
        verify_bundle(bundle)
    assert _one_line(err) == f"{bundle / name}: not listed in the bundle's manifest.json; refusing to read it"
    listed = _bundle(tmp_path / "listed", {name: b'{"red": {"score": "msp", "threshold": 0.5}}'})
    verify_bundle(listed)
    (listed / name).write_text('{"red": {"score": "msp", "threshold": 2.0}}')  # same size, other content
    with pytest.raises(RedkitError, match=f"{name}: sha256 mismatch"):
        verify_bundle(listed)


@pytest.mark.parametrize(
    ("listed", "message"),
    [
        ("modules\\router\\model.safetensors", "contains a path separator"),
        ("modules//router", "component '' is empty"),
        ("modules/ router/model.safetensors", "has leading or trailing whitespace"),
        ("../outside.json", "leaves bundle"),
    ],
)
def test_a_manifest_path_that_is_not_plain_names_inside_the_bundle_is_refused(tmp_path, listed, message):
    from redkit.bundle.manifest import MANIFEST, verify_bundle

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / MANIFEST).write_text(json.dumps({"format": 1, "files": {listed: {"size": 0, "sha256": ""}}}))
    with pytest.raises(RedkitError) as err:
        verify_bundle(bundle)
    assert _one_line(err).startswith(f"{bundle / MANIFEST}: file path {listed!r}") and message in str(err.value)


# ---- copy_modules: a copy cut short leaves no module -----------------------------------------------------


def test_a_copy_cut_short_leaves_no_module_that_a_resumed_add_trusts(tmp_path, monkeypatch):
    import shutil

    from redkit.modules.store import ModuleMeta, copy_modules, module_digest, module_exists, save_module

    def run_at(root: Path):
        return SimpleNamespace(module_dir=lambda *parts: root.joinpath("modules", *parts))

    parent, child = run_at(tmp_path / "parent"), run_at(tmp_path / "child")
    save_module(parent.module_dir("classifier"), {"w": torch.ones(3)}, ModuleMeta("head", {"dim": 3}, "fp"))
    copied = []
    real_copyfile = shutil.copyfile

    def cut_short(src, dst, **kwargs):  # config.json copied whole, then a kill in the middle of the weights
        copied.append(Path(src).name)
        if Path(src).name == "model.safetensors":
            Path(dst).write_bytes(Path(src).read_bytes()[:5])
            raise KeyboardInterrupt
        return real_copyfile(src, dst, **kwargs)

    monkeypatch.setattr(shutil, "copyfile", cut_short)  # what copytree's copy2 calls
    with pytest.raises(KeyboardInterrupt):
        copy_modules(parent, child, [("classifier",)])
    assert "model.safetensors" in copied  # the kill came mid-copy
    assert not module_exists(child.module_dir("classifier"))  # nothing that a resumed add would skip copying
    monkeypatch.setattr(shutil, "copyfile", real_copyfile)
    digests = copy_modules(parent, child, [("classifier",)])  # the resumed add copies it again, whole
    assert digests == {"classifier": module_digest(child.module_dir("classifier"))}
    assert [p.name for p in (tmp_path / "child" / "modules").iterdir()] == ["classifier"]


# ---- log.jsonl: a last line cut short is skipped, a damaged one before it is an error ------------------


def test_a_log_whose_last_line_was_cut_short_reads_without_it_and_says_so(tmp_path, capsys):
    from redkit.jsonfile import jsonl_objects

    log = tmp_path / "log.jsonl"
    log.write_text('{"stage": "base", "epoch": 1}\n{"stage": "base", "epoch": 2}\n{"stage": "ba')
    rows = [row for _, row in jsonl_objects(log, appended=True)]
    assert rows == [{"stage": "base", "epoch": 1}, {"stage": "base", "epoch": 2}]
    err = capsys.readouterr().err
    assert err == f"redkit: warning: {log}:3: last line cut short (a write interrupted); skipped\n"
    with pytest.raises(RedkitError, match=r"log.jsonl:3: malformed JSON"):
        list(jsonl_objects(log))  # a data file is written whole: there it is an error
    log.write_bytes(log.read_bytes()[:-3] + b"\xe2\x82")  # cut in the middle of a UTF-8 character
    assert len(list(jsonl_objects(log, appended=True))) == 2


def test_a_damaged_line_in_the_middle_of_a_log_is_one_line_naming_it(tmp_path):
    from redkit.jsonfile import jsonl_objects

    log = tmp_path / "log.jsonl"
    log.write_text('{"stage": "base", "epoch": 1}\n{"stage": "ba\n{"stage": "base", "epoch": 3}\n')
    with pytest.raises(RedkitError) as err:
        list(jsonl_objects(log, appended=True))
    assert _one_line(err).startswith(f"{log}:2: malformed JSON")


def test_logging_after_a_kill_drops_the_cut_line_instead_of_joining_it(tmp_path):
    from redkit.jsonfile import jsonl_objects
    from redkit.run.base import Run

    run = object.__new__(Run)
    run.dir, run.bundle = tmp_path, None
    run.log({"stage": "base", "epoch": 1})
    with (tmp_path / "log.jsonl").open("ab") as f:
        f.write(b'{"time": 1, "stage": "base", "ep')  # the kill
    run.log({"stage": "base", "epoch": 2})  # the resumed run
    rows = [row for _, row in jsonl_objects(tmp_path / "log.jsonl")]
    assert [row["epoch"] for row in rows] == [1, 2]


# ---- report.html shows names as text ----------------------------------------------------------------


def test_report_html_escapes_labels_and_domains(tmp_path):
    from redkit.report_html import write_html_report

    label, domain = "<script>alert(1)</script>", '<img src=x onerror="alert(2)">'
    (tmp_path / "report.md").write_text(
        f"# fit\n\n| Label | Domain | n |\n|---|---|---|\n| {label} | {domain} | 3 |\n\n"
        f"Labels: {label}, [click](javascript:alert(3))\n"
    )
    page = write_html_report(tmp_path).read_text()
    assert "<script>" not in page and "<img src=x" not in page and 'href="javascript:' not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;img src=x" in page
