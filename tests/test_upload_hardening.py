"""Uploads that cannot hurt the server, and who may change what (redkit serve's admin routes).

A. An owner's uploaded tar (redkit/federated/upload.py `unpack`) is refused in one line, before any member's data
   is read, when it holds a sparse member (GNU 'S', pax GNU.sparse.*), a link, a device or fifo, an oversized or
   chained extended header, too many members or bytes, or a name that is absolute, has '..' or NUL or is too long;
   unpacking such tars stays within a few hundred KB (tracemalloc). Its contents (redkit/federated/validate.py,
   called by assemble.check) are refused when a label is no plain name or comes twice, or the statistics are not
   what train_domain saves: non-finite, counts not whole or out of range, another φ, rows of another domain, a
   scatter that is no scatter. Through the app each is a 4xx with one line, nothing written, the model unchanged,
   and the tar is unpacked off the event loop.
B. Owners' own tokens (--owner-tokens, redkit/serve/tokens.py): 401 unknown, 403 another's name or domain, the
   admin token everything; a malformed tokens file stops `redkit serve` in one line; `redkit hash-token`; TLS.

Fast: no backbone and nothing trained: modules 4 wide with a 6-wide φ, under a made-up fingerprint.
"""

import io
import json
import random
import shutil
import ssl
import subprocess
import sys
import tarfile
import threading
import time
import tracemalloc
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch
from conftest import run_cli

pytest.importorskip("fastapi")

import httpx  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from redkit.atomic import write_json  # noqa: E402
from redkit.bundle.manifest import file_entry  # noqa: E402
from redkit.errors import RedkitError  # noqa: E402
from redkit.federated.assemble import FILES, check  # noqa: E402
from redkit.federated.owner import FORMAT, MANIFEST  # noqa: E402
from redkit.federated.plan import FederationPlan  # noqa: E402
from redkit.federated.upload import MAX_MEMBERS, pack, package, unpack  # noqa: E402
from redkit.fitting.config import FitConfig  # noqa: E402
from redkit.fitting.replay_free import DOMAIN_PARTS as PARTS  # noqa: E402
from redkit.fitting.run import FEDERATION, FitRun  # noqa: E402
from redkit.incremental.projection import ProjectionConfig, RandomProjection  # noqa: E402
from redkit.incremental.statistics import ClassStatistics  # noqa: E402
from redkit.modules.layers import LabelRows  # noqa: E402
from redkit.modules.store import ModuleMeta, load_module, save_module  # noqa: E402
from redkit.oos.owner_density import OwnerDensity  # noqa: E402
from redkit.red.layer import ResidualExpert  # noqa: E402
from redkit.routers.gaussian import DomainStatistics  # noqa: E402
from redkit.serve import admin  # noqa: E402
from redkit.serve.app import create_app  # noqa: E402
from redkit.serve.lifecycle import DomainChanges  # noqa: E402
from redkit.serve.main import ENV, TOKEN_ENV  # noqa: E402
from redkit.serve.testing import ServerThread  # noqa: E402
from redkit.serve.tokens import read_owner_tokens, token_hash  # noqa: E402

FINGERPRINT, DIM, WIDTH = "f" * 16, 4, 6
ROWS = {"alpha": ("ask", "book", "cancel"), "beta": ("deposit", "exchange")}
OWNER, ADMIN = "acme", "admin-token-0123456789"
OWNER_TOKENS = {"acme": "acme-token-0123456789", "bolt": "bolt-token-0123456789"}
TAR = {"content-type": "application/x-tar"}
WHERE = "owner 'acme'"


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


# ---- a contribution: the modules train_domain saves, tiny ----------------------------------------------------


def plan() -> FederationPlan:
    return FederationPlan(fingerprint=FINGERPRINT, router_options={"width": WIDTH, "seed": 0})


def statistics_of(domain: str, labels: tuple[str, ...], width: int = WIDTH) -> DomainStatistics:
    generator = torch.Generator().manual_seed(len(domain))
    phi = torch.relu(torch.randn(10 * len(labels), width, generator=generator, dtype=torch.float64))
    classes = torch.arange(len(phi)) % len(labels)
    stats = ClassStatistics.of(phi, classes, tuple(f"{domain}/{label}" for label in labels))
    return DomainStatistics.of(stats, RandomProjection(ProjectionConfig(DIM, width, 0)), DIM)


def density_of(labels: tuple[str, ...]) -> OwnerDensity:
    generator = torch.Generator().manual_seed(len(labels))
    z, z_val = (torch.randn(10 * len(labels), DIM, generator=generator) for _ in range(2))
    return OwnerDensity.of(z, torch.arange(len(z)) % len(labels), labels, z_val)


def save_part(work: Path, part: tuple[str, ...], domain: str, module, kind: str | None = None) -> None:
    meta = ModuleMeta(kind or part[-1], vars(module.config), FINGERPRINT)
    save_module(work.joinpath("modules", *part, domain), module, meta)


def write_manifest(work: Path, rows: dict) -> None:
    """contribution.json of the modules in `work` (sizes and sha256 as they are now), label_rows as given."""
    files = {
        str(Path("modules", *part, d, name)): file_entry(work.joinpath("modules", *part, d, name))
        for d in rows
        for part in PARTS
        for name in FILES
    }
    manifest = {
        "format": FORMAT,
        "domains": list(rows),
        "label_rows": {d: list(labels) for d, labels in rows.items()},
        "fingerprint": FINGERPRINT,
        "dim": DIM,
        "router_options": {"width": WIDTH, "seed": 0},
        "files": files,
    }
    write_json(work / MANIFEST, manifest)


@pytest.fixture(scope="module")
def genuine(tmp_path_factory) -> Path:
    """Owner acme's work directory: domains alpha and beta, as train_contribution leaves it (modules + manifest)."""
    work = tmp_path_factory.mktemp("acme")
    torch.manual_seed(0)
    for domain, labels in ROWS.items():
        expert = ResidualExpert(ResidualExpert.Config(dim=DIM, rank=2))
        rows = LabelRows(LabelRows.Config(dim=DIM, num_classes=len(labels), labels=labels))
        for part, module in zip(PARTS, (expert, rows, statistics_of(domain, labels), density_of(labels))):
            save_part(work, part, domain, module)
    write_manifest(work, ROWS)
    return work


@pytest.fixture
def owner_dir(genuine, tmp_path) -> Path:
    """A copy of the genuine contribution, to tamper with."""
    return Path(shutil.copytree(genuine, tmp_path / "owner"))


def tampered_statistics(work: Path, domain: str = "alpha", part: str = "statistics", **tensors) -> Path:
    """`work` with `domain`'s statistics tensors changed (counts=..., means=..., scatter=...; or another `part`'s),
    manifest refreshed."""
    path = work / "modules" / part / domain
    module, meta = load_module(path)
    for name, change in tensors.items():
        getattr(module, name).copy_(change(getattr(module, name).clone()))
    save_module(path, module, meta)
    write_manifest(work, ROWS)
    return work


# ---- A: unpack ----------------------------------------------------------------------------------------------


def tar_of(*members: tuple[tarfile.TarInfo, bytes | None], fmt=tarfile.PAX_FORMAT, **kwargs) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt, **kwargs) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def member(name: str, kind=tarfile.REGTYPE, data: bytes = b"", **fields) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, len(data)
    for key, value in fields.items():
        setattr(info, key, value)
    return info, data


def gnu_sparse(extension_blocks: int = 0) -> bytes:
    """A raw GNU sparse member (typeflag 'S'), with `extension_blocks` blocks of 21 sparse entries after its header
    (what tarfile would read into a list before returning the member)."""
    head = bytearray(member("modules/sparse", tarfile.GNUTYPE_SPARSE)[0].tobuf(format=tarfile.GNU_FORMAT))
    entries = b"".join(b"%011o\0%011o\0" % (k * 1024, 1) for k in range(21))  # offset, numbytes
    blocks = b""
    if extension_blocks:
        head[482] = 1  # isextended: extension blocks follow
        head[148:156] = b" " * 8
        head[148:156] = b"%06o\0 " % sum(head)  # the header's checksum again
        blocks = (entries + b"\x01" + b"\0" * 7) * (extension_blocks - 1) + entries + b"\0" * 8  # byte 504: more
    return bytes(head) + blocks + b"\0" * 1024


def pax_sparse(major: str, minor: str) -> bytes:
    headers = {"GNU.sparse.major": major, "GNU.sparse.minor": minor, "GNU.sparse.realsize": "99"}
    if major == "0":
        headers |= {"GNU.sparse.numblocks": "1", "GNU.sparse.offset": "0", "GNU.sparse.numbytes": "9"}
    return tar_of(member("modules/sparse", data=b"1\n0\n1\n" + b"x" * 100, pax_headers=headers))


def pax_chain(headers: int) -> bytes:
    """`headers` pax headers in a row before one member (tarfile recurses once per header)."""
    one = tar_of(member("modules/a", data=b"a", pax_headers={"comment": "c"}))
    return one[:1024] * headers + one  # a pax header and its records are the first two blocks


BAD_TARS = {
    "GNU sparse": (gnu_sparse(), "member 'modules/sparse' is sparse"),
    "pax sparse 0.0": (pax_sparse("0", "0"), "member 'modules/sparse' is sparse"),
    "pax sparse 1.0": (pax_sparse("1", "0"), "member 'modules/sparse' is sparse"),
    "symlink": (tar_of(member("modules/l", tarfile.SYMTYPE, linkname="/etc/passwd")), "'modules/l' is a link"),
    "hardlink": (tar_of(member("modules/h", tarfile.LNKTYPE, linkname=MANIFEST)), "'modules/h' is a link"),
    "device": (tar_of(member("modules/d", tarfile.CHRTYPE, devmajor=1, devminor=3)), "is a device or fifo"),
    "fifo": (tar_of(member("modules/f", tarfile.FIFOTYPE)), "'modules/f' is a device or fifo"),
    "huge pax header": (
        tar_of(member("modules/a", data=b"a", pax_headers={"comment": "c" * 300_000})),
        "of 300,016 bytes (at most 65,536)",
    ),
    "pax headers chained": (pax_chain(3000), "more than 8 extended headers in a row"),
    "global pax header": (tar_of(member("modules/a", data=b"a"), pax_headers={"x": "y"}), "a global pax header"),
    "10,000 members": (
        tar_of(*(member(f"m/{k}", data=b"x") for k in range(10_000)), fmt=tarfile.USTAR_FORMAT),
        f"more than {MAX_MEMBERS} members",
    ),
    "absolute name": (tar_of(member("/etc/cron.d/x", data=b"x")), "'/etc/cron.d/x' has an absolute name"),
    "'..' in its name": (tar_of(member("modules/../../x", data=b"x")), "has '..' in its name"),
    "NUL in its name": (
        tar_of(member("modules/a", data=b"x", pax_headers={"path": "modules/a\0b"})),  # a ustar name stops at NUL
        "'modules/a\\x00b' has a NUL in its name",
    ),
    "name too long": (tar_of(member("m/" + "n" * 400, data=b"x")), "has a name of 402 characters (1 to 256)"),
    "negative size": (tar_of(member("m/a", data=b"x", pax_headers={"size": "-512"})), "negative size (-512)"),
    "twice": (tar_of(member("m/a", data=b"x"), member("m/a", data=b"y")), "member 'm/a' twice"),
    "over the limit": (tar_of(member("m/a", data=b"a" * 600), member("m/b", data=b"b" * 600)), "over 1,000 bytes"),
    "not a tar": (b"x" * 600, "not a tar archive"),
}


@pytest.mark.parametrize("name", list(BAD_TARS))
def test_unpack_refuses_in_one_line_naming_the_member(name):
    body, says = BAD_TARS[name]
    with pytest.raises(RedkitError) as err:
        unpack(body, WHERE, limit=1_000)
    message = str(err.value)
    assert message.startswith(f"{WHERE}: ") and says in message and "\n" not in message, message


def peak_bytes(body: bytes) -> int:
    """Peak Python allocations while `unpack` refuses `body` (the body itself allocated before)."""
    tracemalloc.start()
    try:
        with pytest.raises(RedkitError):
            unpack(body, WHERE)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_unpacking_what_is_refused_stays_small_in_memory():
    """Stock tarfile: 19 MB for the 5 MB sparse map below, 4.4 MB to list the 10,000 members, and a RecursionError
    (a 500) for 3,000 chained pax headers; refused before any of it, under 2 MB each (measured: 8-140 KB)."""
    cases = {
        "10,000 members": BAD_TARS["10,000 members"][0],
        "GNU sparse, 10,000 extension blocks": gnu_sparse(10_000),
        "pax sparse 1.0": pax_sparse("1", "0"),
        "pax headers chained": pax_chain(3000),
    }
    peaks = {name: peak_bytes(body) for name, body in cases.items()}
    print(
        "peak bytes while refusing:",
        {name: f"{peak:,} of a {len(cases[name]):,}-byte body" for name, peak in peaks.items()},
    )
    assert all(peak < 2 * 2**20 for peak in peaks.values()), peaks


def test_broken_tars_are_a_redkit_error_or_read_whole(genuine):
    """Truncated anywhere, or with bytes overwritten anywhere: a RedkitError (a 4xx) or the files, never another
    exception (a 500)."""
    body, rng = pack(package(genuine)), random.Random(0)
    assert unpack(body, WHERE) == package(genuine)
    for cut in range(0, len(body), 97):  # anything but a RedkitError fails the test
        try:
            unpack(body[:cut], WHERE)
        except RedkitError:
            pass
    for _ in range(400):
        broken = bytearray(body)
        at = rng.randrange(0, 3 * 512) if rng.random() < 0.7 else rng.randrange(len(body))  # headers mostly
        broken[at : at + 4] = rng.randbytes(4)
        try:
            unpack(bytes(broken), WHERE)
        except RedkitError:
            pass


# ---- A: what a contribution holds (validate.py, through assemble.check) ---------------------------------------


def test_the_genuine_contribution_is_accepted(genuine, tmp_path):
    accepted = check(package(genuine), plan(), OWNER, tmp_path)
    assert accepted.directory == tmp_path / OWNER and accepted.manifest["label_rows"]["alpha"] == list(ROWS["alpha"])


def test_a_scatter_kept_at_another_rank_than_the_plans_is_refused_naming_the_field(owner_dir, tmp_path):
    """A statistics module whose scatter is a rank-2 factor (scatter_factor.py) in a plan of whole scatters: one line,
    nothing staged; the same factor in a plan that asks for rank 2 is accepted and staged as sent."""
    projection = RandomProjection(ProjectionConfig(DIM, WIDTH, 0))
    for domain in ROWS:
        path = owner_dir / "modules" / "statistics" / domain
        save_part(
            owner_dir,
            ("statistics",),
            domain,
            DomainStatistics.of(load_module(path)[0].statistics(), projection, DIM, 2),
        )
    write_manifest(owner_dir, ROWS)
    for work in ("whole", "ranked"):
        (tmp_path / work).mkdir()
    with pytest.raises(
        RedkitError, match=f"^{WHERE}: .*statistics field 'rank': its scatter is kept at rank 2, the plan's is 0$"
    ):
        check(package(owner_dir), plan(), OWNER, tmp_path / "whole")
    assert not (tmp_path / "whole" / OWNER).exists()

    ranked = replace(plan(), router_options={"width": WIDTH, "seed": 0, "scatter_rank": 2})
    manifest = json.loads((owner_dir / MANIFEST).read_bytes()) | {"router_options": ranked.router_options}
    write_json(owner_dir / MANIFEST, manifest)
    accepted = check(package(owner_dir), ranked, OWNER, tmp_path / "ranked")
    assert all((accepted.directory / rel).read_bytes() == (owner_dir / rel).read_bytes() for rel in manifest["files"])


def test_statistics_travel_compact_and_are_staged_as_the_owner_saved_them(genuine, tmp_path):
    """The scatters are sent in their compact form (compact.py) and staged byte for byte as the owner's files; a
    compact file altered, or a manifest that gives its files more bytes than the limit, is refused in one line
    before anything is staged."""
    sent, manifest = package(genuine), json.loads((genuine / MANIFEST).read_bytes())
    for work in ("ok", "altered", "huge"):
        (tmp_path / work).mkdir()
    statistics = [rel for rel in sent if "/statistics/" in rel and rel.endswith(".safetensors")]
    assert statistics and all(len(sent[rel]) < manifest["files"][rel]["size"] for rel in statistics)
    accepted = check(sent, plan(), OWNER, tmp_path / "ok")
    assert all((accepted.directory / rel).read_bytes() == (genuine / rel).read_bytes() for rel in manifest["files"])

    altered = dict(sent)
    altered[statistics[0]] = sent[statistics[0]][:-9] + bytes([sent[statistics[0]][-9] ^ 4]) + sent[statistics[0]][-8:]
    with pytest.raises(RedkitError, match=f"^{WHERE}: file '{statistics[0]}': ") as err:
        check(altered, plan(), OWNER, tmp_path / "altered")
    huge = manifest | {"files": manifest["files"] | {statistics[0]: {"size": 2**40, "sha256": "0" * 64}}}
    with pytest.raises(RedkitError, match="its manifest gives files of 1,099,511,6") as big:
        check(sent | {MANIFEST: json.dumps(huge).encode()}, plan(), OWNER, tmp_path / "huge")
    assert "\n" not in str(err.value) + str(big.value)
    assert not any((tmp_path / "altered").iterdir()) and not any((tmp_path / "huge").iterdir())


def relabel(work: Path, rows: dict) -> Path:
    write_manifest(work, rows)
    return work


def restatistic(work: Path, module, kind: str | None = None, part: str = "statistics") -> Path:
    """`work` with another module saved as alpha's statistics (or `part`; of `kind`, else the part's), manifest
    refreshed."""
    save_part(work, (part,), "alpha", module, kind)
    write_manifest(work, ROWS)
    return work


NAN = float("nan")
BAD_CONTENTS = {
    "non-finite means": (
        lambda w: tampered_statistics(w, means=lambda m: m.index_fill(1, torch.tensor([0]), NAN)),
        "tensor 'means' holds NaN or infinite values",
    ),
    "negative counts": (
        lambda w: tampered_statistics(w, counts=lambda c: -c),
        "domain 'alpha': statistics field 'counts' must be whole numbers of examples from 1 to 10,000,000",
    ),
    "fractional counts": (lambda w: tampered_statistics(w, counts=lambda c: c + 0.5), "field 'counts' must be whole"),
    "absurd counts": (lambda w: tampered_statistics(w, counts=lambda c: c * 1e9), "field 'counts' must be whole"),
    "absurd means": (lambda w: tampered_statistics(w, means=lambda m: m + 1e200), "field 'means' has entries beyond"),
    "asymmetric scatter": (
        lambda w: tampered_statistics(w, scatter=lambda s: s + torch.triu(torch.ones_like(s), 1)),
        "field 'scatter' is not symmetric",
    ),
    "indefinite scatter": (
        lambda w: tampered_statistics(w, scatter=lambda s: s - 1e3 * torch.eye(len(s), dtype=s.dtype)),
        "field 'scatter' is not positive semi-definite",
    ),
    "scatter too large to sum": (
        lambda w: tampered_statistics(w, scatter=lambda s: s * 1e12),
        "field 'scatter': scatter entries up to",
    ),
    "statistics of another width": (
        lambda w: restatistic(w, statistics_of("alpha", ROWS["alpha"], width=WIDTH + 1)),
        "statistics field 'config': φ of width 7 seed 0, the plan's 6 0",
    ),
    "statistics rows of another domain": (
        lambda w: restatistic(w, statistics_of("beta", ROWS["alpha"])),
        "statistics field 'labels' must be its label rows",
    ),
    "density of other labels": (
        lambda w: restatistic(w, density_of(ROWS["beta"]), part="density"),
        "domain 'alpha': density field 'labels' must be its label rows, in order",
    ),
    "density dividing by zero": (
        lambda w: tampered_statistics(w, part="density", calibration=lambda c: c * torch.tensor([1.0, 0.0])),
        "domain 'alpha': density field 'calibration' must end with a positive standard deviation",
    ),
    "a module of another kind": (
        lambda w: restatistic(w, LabelRows(LabelRows.Config(DIM, 3, ROWS["alpha"])), kind="label_rows"),
        "statistics field 'kind' is 'label_rows', not 'statistics'",
    ),
    "label_rows with a non-str": (lambda w: relabel(w, ROWS | {"alpha": ["ask", 3, "cancel"]}), "'label_rows'"),
    "label_rows with a path": (
        lambda w: relabel(w, ROWS | {"alpha": ["ask", "../book", "cancel"]}),
        "field 'label_rows' of domain 'alpha': label '../book' contains a path separator",
    ),
    "label_rows with a label twice": (
        lambda w: relabel(w, ROWS | {"beta": ["deposit", "ask"]}),
        "label 'ask' is given twice (also in domain 'alpha')",
    ),
    "label_rows not the module's": (
        lambda w: relabel(w, ROWS | {"alpha": ["ask", "cancel", "book"]}),
        "domain 'alpha': label_rows field 'labels' must be its contribution.json label_rows, in order",
    ),
    "label_rows empty": (lambda w: relabel(w, ROWS | {"alpha": []}), "'label_rows'"),
}


@pytest.mark.parametrize("name", list(BAD_CONTENTS))
def test_bad_contents_are_refused_in_one_line_and_nothing_is_written(name, owner_dir, tmp_path):
    tamper, says = BAD_CONTENTS[name]
    received = tmp_path / "received"
    received.mkdir()
    with pytest.raises(RedkitError) as err:
        check(package(tamper(owner_dir)), plan(), OWNER, received)
    message = str(err.value)  # "owner 'acme': ...", of the owner's file, never of the server's staging folder
    assert message.startswith("owner 'acme': ") and says in message and "\n" not in message, message
    assert str(received) not in message, message
    assert list(received.iterdir()) == []


# ---- the app: a served run assembled from owners acme (alpha, beta) and bolt (gamma) --------------------------


@dataclass(frozen=True)
class Served:
    """What the admin routes see of a served model (a BundlePredictor's fields they read)."""

    source_run: Path
    domains: tuple[str, ...] = ("alpha", "beta", "gamma")
    version: int = 1
    directory: Path = Path("bundle")

    def info(self) -> dict:
        return {"version": self.version, "domains": list(self.domains), "fingerprint": FINGERPRINT}


@pytest.fixture(scope="module")
def assembled(tmp_path_factory) -> Path:
    """A run as assemble leaves it, for what the routes read of it: its config and its federation record."""
    rows = ROWS | {"gamma": ("fly",)}
    domains = tuple(sorted(rows))
    config = FitConfig(
        **plan().config_fields(),
        labels=tuple(label for d in domains for label in rows[d]),
        domains=domains,
        label_domains=tuple(d for d in domains for _ in rows[d]),
        label_rows=rows,
    )
    run = FitRun(tmp_path_factory.mktemp("assembled") / "run", config)
    record = {"owners": {"acme": ["alpha", "beta"], "bolt": ["gamma"]}, "plan": json.loads(plan().to_json())}
    write_json(run.dir / FEDERATION, record)
    return run.dir


class Recorded:
    """DomainChanges' interface, recording what the routes let through (a new version each, nothing built)."""

    def __init__(self):
        self.calls: list[tuple[str, str]] = []

    def contribute(self, current, owner, files):
        self.calls.append(("contribute", owner))
        return replace(current, version=current.version + 1)

    def add(self, current, name):
        self.calls.append(("add", name))
        return replace(current, version=current.version + 1)

    def remove(self, current, name):
        if name not in current.domains:
            raise KeyError(name)
        self.calls.append(("remove", name))
        return replace(current, version=current.version + 1)


def tokens_file(path: Path, tokens: dict) -> Path:
    path.write_text(json.dumps({owner: token_hash(token) for owner, token in tokens.items()}))
    return path


def client_of(assembled: Path, changes, tmp_path: Path, **settings) -> TestClient:
    owners = read_owner_tokens(tokens_file(tmp_path / "owners.json", OWNER_TOKENS))
    app = create_app(
        lambda: Served(assembled), admin_token=ADMIN, domain_changes=changes, owner_tokens=owners, **settings
    )
    return TestClient(app)


def ready(client: TestClient) -> TestClient:
    deadline = time.monotonic() + 10
    while client.get("/health").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return client


APP_REFUSALS = ["GNU sparse", "symlink", "huge pax header", "10,000 members", "absolute name"]


def test_through_the_app_a_bad_upload_is_a_422_nothing_written_the_model_unchanged(
    assembled, genuine, owner_dir, tmp_path
):
    """The real route, DomainChanges and assemble.check: one line back, no file under the work directory."""
    work = tmp_path / "work"
    changes = DomainChanges(None, work, lambda *_: None, 20 * 2**20)
    bodies = {name: BAD_TARS[name][0] for name in APP_REFUSALS}
    bodies["negative counts"] = pack(package(tampered_statistics(owner_dir, counts=lambda c: -c)))
    bodies["label_rows with a path"] = pack(package(relabel(owner_dir, ROWS | {"alpha": ["ask", "../b", "c"]})))
    with client_of(assembled, changes, tmp_path, max_upload_bytes=20 * 2**20) as client:
        ready(client)
        for name, body in bodies.items():
            answer = client.post("/v1/domains", params={"owner": OWNER}, content=body, headers=TAR | bearer(ADMIN))
            message = answer.json()["error"]["message"]
            assert answer.status_code == 422 and "\n" not in message and "'acme'" in message, (name, answer.text)
        assert client.get("/v1/info").json()["version"] == 1
    assert [p for p in work.rglob("*") if not p.is_dir()] == []


def test_an_upload_is_unpacked_off_the_event_loop(assembled, monkeypatch, tmp_path):
    """While one upload is being unpacked, the server answers others (/health) at once."""
    unpacking, release = threading.Event(), threading.Event()

    def slow_unpack(body, where, limit):
        unpacking.set()
        assert release.wait(10)
        return {}

    monkeypatch.setattr(admin, "unpack", slow_unpack)
    changes = Recorded()
    owners = read_owner_tokens(tokens_file(tmp_path / "owners.json", OWNER_TOKENS))
    app = create_app(lambda: Served(assembled), admin_token=ADMIN, domain_changes=changes, owner_tokens=owners)
    with ServerThread(app) as server:
        while httpx.get(server.url + "/health").status_code != 200:
            time.sleep(0.01)
        upload = threading.Thread(
            target=httpx.post,
            args=(server.url + "/v1/domains",),
            kwargs={"params": {"owner": OWNER}, "content": b"tar", "headers": TAR | bearer(ADMIN), "timeout": 20},
        )
        upload.start()
        assert unpacking.wait(10)
        started = time.monotonic()
        assert httpx.get(server.url + "/health", timeout=5).status_code == 200
        answered_in = time.monotonic() - started
        release.set()
        upload.join(20)
    assert answered_in < 2 and changes.calls == [("contribute", OWNER)]


# ---- B: who may change what -----------------------------------------------------------------------------------


def test_owner_tokens_upload_and_remove_their_own_only(assembled, tmp_path):
    changes = Recorded()
    acme, bolt = bearer(OWNER_TOKENS["acme"]), bearer(OWNER_TOKENS["bolt"])
    with client_of(assembled, changes, tmp_path) as client:
        ready(client)

        def upload(owner: str, auth: dict) -> httpx.Response:
            return client.post("/v1/domains", params={"owner": owner}, content=pack({}), headers=TAR | auth)

        statuses = {
            "no token": upload("acme", {}).status_code,
            "unknown token": upload("acme", bearer("x" * 24)).status_code,
            "a hash as token": upload("acme", bearer(token_hash(OWNER_TOKENS["acme"]))).status_code,
            "acme as bolt": upload("bolt", acme).status_code,
            "acme adds an expert": client.post("/v1/domains", json={"expert": "tech"}, headers=acme).status_code,
            "acme removes bolt's": client.delete("/v1/domains/gamma", headers=acme).status_code,
            "acme removes a domain nobody has": client.delete("/v1/domains/zeta", headers=acme).status_code,
            "bolt removes acme's": client.delete("/v1/domains/alpha", headers=bolt).status_code,
        }
        assert changes.calls == [] and client.get("/v1/info").json()["version"] == 1
        assert statuses == {
            "no token": 401,
            "unknown token": 401,
            "a hash as token": 401,
            "acme as bolt": 403,
            "acme adds an expert": 403,
            "acme removes bolt's": 403,
            "acme removes a domain nobody has": 403,
            "bolt removes acme's": 403,
        }
        messages = [
            upload("bolt", acme).json()["error"]["message"],
            client.post("/v1/domains", json={"expert": "tech"}, headers=acme).json()["error"]["message"],
            client.delete("/v1/domains/gamma", headers=acme).json()["error"]["message"],
            upload("acme", {}).json()["error"]["message"],
        ]
        assert messages == [
            "owner 'acme''s token uploads only as that owner (?owner=acme)",
            "owner 'acme''s token only uploads; adding an expert needs the admin token",
            "owner 'acme''s token removes only that owner's domains, not 'gamma'",
            "missing or invalid token",
        ]
        assert upload("acme", acme).status_code == 200
        assert client.delete("/v1/domains/beta", headers=acme).status_code == 200
        assert client.delete("/v1/domains/gamma", headers=bolt).status_code == 200
        assert upload("bolt", bearer(ADMIN)).status_code == 200  # the admin token does everything
        assert client.post("/v1/domains", json={"expert": "tech"}, headers=bearer(ADMIN)).status_code == 200
        assert client.delete("/v1/domains/alpha", headers=bearer(ADMIN)).status_code == 200
    assert changes.calls == [
        ("contribute", "acme"),
        ("remove", "beta"),
        ("remove", "gamma"),
        ("contribute", "bolt"),
        ("add", "tech"),
        ("remove", "alpha"),
    ]


GOOD_HASH = token_hash("t" * 20)
BAD_TOKEN_FILES = {
    "not JSON": ("{", "not JSON"),
    "not an object": ("[]", "must be a JSON object"),
    "an owner name that is a path": (json.dumps({"../x": GOOD_HASH}), "owner '../x' contains a path separator"),
    "not sha256": (json.dumps({"acme": "md5:" + "0" * 32}), "key 'acme' must give sha256: and 64 hex digits"),
    "short hex": (json.dumps({"acme": "sha256:abc"}), "key 'acme' must give sha256: and 64 hex digits"),
    "not hex": (json.dumps({"acme": "sha256:" + "z" * 64}), "key 'acme' must give sha256: and 64 hex digits"),
    "a key twice": (f'{{"acme": "{GOOD_HASH}", "acme": "{GOOD_HASH}"}}', "key 'acme' twice"),
    "one token, two owners": (json.dumps({"acme": GOOD_HASH, "bolt": GOOD_HASH}), "keys 'acme' and 'bolt'"),
}


@pytest.mark.parametrize("name", list(BAD_TOKEN_FILES))
def test_a_malformed_tokens_file_stops_redkit_serve_in_one_line(name, tmp_path, monkeypatch, capsys):
    text, says = BAD_TOKEN_FILES[name]
    (tmp_path / "owners.json").write_text(text)
    monkeypatch.setenv(TOKEN_ENV, ADMIN)
    monkeypatch.setenv(ENV, "{}")  # restored after: serve() writes its config there
    code, _, err = run_cli(["serve", "--bundle", tmp_path, "--owner-tokens", tmp_path / "owners.json"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"--owner-tokens {tmp_path / 'owners.json'}: " in err and says in err, err


def test_hash_token_prints_the_line_the_server_reads(tmp_path, monkeypatch, capsys):
    token = OWNER_TOKENS["acme"]
    monkeypatch.setattr(sys, "stdin", io.StringIO(token + "\n"))
    code, out, _ = run_cli(["hash-token"], capsys)
    monkeypatch.setenv("ACME_TOKEN", token)
    assert (code, out) == (0, token_hash(token) + "\n")
    assert run_cli(["hash-token", "--token-env", "ACME_TOKEN"], capsys)[:2] == (0, out)
    monkeypatch.setattr(sys, "stdin", io.StringIO("short\n"))
    code, _, err = run_cli(["hash-token"], capsys)
    assert code == 2 and "at least 16 characters" in err
    (tmp_path / "owners.json").write_text(json.dumps({"acme": out.strip()}))
    assert read_owner_tokens(tmp_path / "owners.json")["acme"].hex() == out.strip().removeprefix("sha256:")


# ---- B: TLS ---------------------------------------------------------------------------------------------------


class Captured:
    """uvicorn.Server in place of the real one: keeps the config `redkit serve` built, serves nothing."""

    configs: list = []

    def __init__(self, config):
        Captured.configs.append(config)

    def run(self):
        pass


@pytest.fixture
def certificate(tmp_path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a self-signed certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        + ["-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"]
        + ["-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def test_tls_flags_reach_uvicorn_and_it_serves_https(certificate, assembled, tmp_path, monkeypatch, capsys):
    import uvicorn

    cert, key = certificate
    monkeypatch.setattr(uvicorn, "Server", Captured)
    monkeypatch.setenv(ENV, "{}")
    Captured.configs.clear()
    code, _, err = run_cli(["serve", "--bundle", tmp_path, "--ssl-certfile", cert, "--ssl-keyfile", key], capsys)
    assert code == 0, err
    (config,) = Captured.configs
    assert (config.ssl_certfile, config.ssl_keyfile) == (str(cert), str(key))
    monkeypatch.undo()  # the real uvicorn.Server again

    server = ServerThread(create_app(lambda: Served(assembled)))
    server.server.config.ssl_certfile, server.server.config.ssl_keyfile = config.ssl_certfile, config.ssl_keyfile
    with server:
        trusted = ssl.create_default_context(cafile=str(cert))
        answer = httpx.get(f"https://127.0.0.1:{server.port}/health", verify=trusted, timeout=10)
    assert answer.status_code in (200, 503)  # over TLS, whether or not the model has loaded yet

    code, _, err = run_cli(["serve", "--bundle", tmp_path, "--ssl-certfile", key, "--ssl-keyfile", cert], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "not a certificate and its key" in err, err
    code, _, err = run_cli(["serve", "--bundle", tmp_path, "--ssl-keyfile", key], capsys)
    assert code == 2 and "--ssl-keyfile needs --ssl-certfile" in err
