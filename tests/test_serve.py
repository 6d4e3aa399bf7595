"""`redkit serve` as users run it: a real uvicorn server on a free port, called over HTTP.

One fitted run (the generated topics set, 4 domains x 3 intents) and its bundle are shared by the module.
The bundle's serving graph answers as the run's own modules do; bad input is a clear 4xx and the server
keeps serving; a domain is added and removed while queries keep coming, each answered whole by the old
or the new model."""

import asyncio
import contextlib
import io
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import run_cli

pytest.importorskip("onnxruntime")
pytest.importorskip("fastapi")

from redkit.fitting.topics import topic_records, write_topics  # noqa: E402
from redkit.serve.main import TOKEN_ENV, ServeConfig, create  # noqa: E402
from redkit.serve.testing import ServerThread  # noqa: E402

TOKEN = "test-admin-token-0123456789"
AUTH = {"authorization": f"Bearer {TOKEN}"}
JSON = {"content-type": "application/json"}
QUERIES = [
    "book me a flight to lisbon",
    "my card was charged twice",
    "how long do i boil an egg",
    "i have a sore throat and a fever since yesterday",
    "cancel the hotel",
    "x",
    "transfer money to my savings account please, today if possible, thank you very much",
    "tell me about the weather on mars",
]


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> dict[str, Path]:
    """A fitted run, its bundle (with the serving graph), and the expert of a new domain trained from the bundle."""
    from redkit.cli import main

    root = tmp_path_factory.mktemp("serve")
    data = write_topics(root / "topics", train=240, val=0, test=80, domains=4, labels_per_domain=3)
    tech = root / "tech"
    tech.mkdir()
    rows = [r for r in topic_records(600, 5, 3, seed=11) if r["domain"] == "tech"][:60]
    (tech / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # Out-of-scope validation texts: the run records an OOS threshold, which the serving graph must apply too.
    oos = root / "oos.jsonl"
    subjects = [
        "the weather on mars",
        "a poem about rain",
        "the capital of peru",
        "chess openings",
        "how tall giraffes get",
    ]
    oos.write_text("".join(json.dumps({"text": f"tell me about {s} {i}"}) + "\n" for i in range(6) for s in subjects))
    with contextlib.redirect_stdout(io.StringIO()):
        fit = ["fit", "--data", str(data), "--out", str(root / "run"), "--max-epochs", "4", "--oos", str(oos)]
        assert main(fit) == 0
        assert main(["export", "--run", str(root / "run"), "--out", str(root / "bundle")]) == 0
        experts = root / "experts"
        assert (
            main(
                ["train-expert", "--bundle", str(root / "bundle"), "--data", str(tech), "--out", str(experts / "tech")]
            )
            == 0
        )
    return {"run": root / "run", "bundle": root / "bundle", "experts": experts, "root": root}


@contextlib.contextmanager
def server(config: ServeConfig):
    os.environ[TOKEN_ENV] = TOKEN
    with ServerThread(create(config), start_timeout_s=30) as running:
        deadline = time.monotonic() + 60
        while httpx.get(running.url + "/health").status_code != 200:
            assert time.monotonic() < deadline, "the server did not become ready"
            time.sleep(0.02)
        yield running


def test_the_bundle_answers_as_the_run_whatever_the_batch(served):
    """Labels identical and probabilities within 1e-5 of FittedRun.predict, one text per request or all at once."""
    import redkit

    expected = redkit.load(served["run"]).predict(QUERIES)
    with server(ServeConfig(bundle=str(served["bundle"]))) as running, httpx.Client(base_url=running.url) as client:
        together = client.post("/v1/predict", json={"texts": QUERIES}).json()["predictions"]
        alone = [client.post("/v1/predict", json={"texts": [q]}).json()["predictions"][0] for q in QUERIES]
        info = client.get("/v1/info").json()
    assert info["out_of_scope"]["threshold"] is not None  # the run's rule travelled, whatever its score needs
    assert {want.out_of_scope for want in expected} <= {True, False}
    for answers in (together, alone):
        for want, got in zip(expected, answers):
            assert got["label"] == want.label and got["out_of_scope"] == want.out_of_scope
            assert abs(got["probability"] - want.probability) < 1e-5
            assert all(abs(got["weights"][d] - w) < 1e-5 for d, w in want.weights.items())
    assert info["domains"] == list(redkit.load(served["run"]).domains) and info["version"] == 1
    assert info["fingerprint"] and info["labels"] and info["composition"] == "red"


def test_predict_on_a_bundle_imports_no_torch_and_answers_as_the_server(served):
    probe = (
        "import sys; from redkit.cli import main; main(['predict', '--bundle', sys.argv[1], '--json', sys.argv[2]]);"
        "print(sorted(m for m in ('torch', 'transformers', 'sklearn', 'scipy') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(served["bundle"]), QUERIES[0]], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    record, imported = done.stdout.strip().splitlines()
    assert imported == "[]"
    import redkit

    want = redkit.load(served["run"]).predict(QUERIES[:1])[0]
    got = json.loads(record)
    assert got["label"] == want.label and abs(got["probability"] - want.probability) < 1e-5


BAD_INPUTS = [
    ("malformed JSON", b'{"texts": ["a"', JSON, 400, "malformed_json"),
    ("empty body", b"", JSON, 400, "malformed_json"),
    ("not UTF-8", b'{"texts": ["\xff"]}', JSON, 400, "malformed_json"),
    ("missing texts", b"{}", JSON, 422, "invalid_request"),
    ("texts not a list", b'{"texts": "a"}', JSON, 422, "invalid_request"),
    ("non-string item", b'{"texts": ["a", 1]}', JSON, 422, "invalid_request"),
    ("unknown field", b'{"texts": ["a"], "extra": 1}', JSON, 422, "invalid_request"),
    ("no texts", b'{"texts": []}', JSON, 422, "invalid_request"),
    ("empty string", b'{"texts": ["a", ""]}', JSON, 422, "empty_text"),
    ("whitespace string", b'{"texts": [" \\n "]}', JSON, 422, "empty_text"),
    ("too many texts", json.dumps({"texts": ["a"] * 5}).encode(), JSON, 422, "too_many_texts"),
    ("text too long", json.dumps({"texts": ["x" * 51]}).encode(), JSON, 422, "text_too_long"),
    ("text/plain", b'{"texts": ["a"]}', {"content-type": "text/plain"}, 415, "unsupported_media_type"),
    ("no content type", b'{"texts": ["a"]}', {}, 415, "unsupported_media_type"),
    ("body too large", b'{"texts": ["' + b"a" * 2000 + b'"]}', JSON, 413, "body_too_large"),
]


def test_bad_input_is_a_clear_4xx_and_the_server_keeps_serving(served):
    limits = {"max_batch": 4, "max_chars": 50, "max_body_bytes": 2000}
    with (
        server(ServeConfig(bundle=str(served["bundle"]), **limits)) as running,
        httpx.Client(base_url=running.url) as c,
    ):
        for name, body, headers, status, code in BAD_INPUTS:
            response = c.post("/v1/predict", content=body, headers=headers)
            assert (response.status_code, response.json()["error"]["code"]) == (status, code), name
        assert c.post("/v1/predict", json={"texts": ["a" * 50] * 4}).status_code == 200
        # Admin routes do not exist without a token.
        assert c.post("/v1/domains", json={"expert": "tech"}).status_code == 404
        assert c.delete("/v1/domains/banking").status_code == 404
        metrics = c.get("/metrics").text
    assert 'redkit_http_requests_total{route="/v1/predict",method="POST",status="415"} 2.0' in metrics
    assert "redkit_batch_size_texts_bucket" in metrics and "redkit_http_request_duration_seconds_bucket" in metrics


def test_fuzzing_ends_with_no_5xx_and_the_server_alive(served):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import fuzz_serve

    limits = {"max_batch": 8, "max_chars": 200, "max_body_bytes": 20_000}
    with fuzz_serve.server_errors_logged() as logged, fuzz_serve.fuzz_server(served["bundle"], **limits) as running:
        report = asyncio.run(fuzz_serve.run_fuzz(running.url, requests=300, seed=3, limits=limits))
        assert httpx.get(running.url + "/health").status_code == 200
    assert not report.server_errors and not report.transport_errors and not logged
    assert report.total + report.raw_sent == 300


def test_a_domain_is_added_and_removed_while_queries_are_answered(served, tmp_path):
    """Queries keep coming during both swaps: every one answered 200, each by one model version whose
    domains its weights name (never a mix); a bad token is 401; a bundle without its run refuses (409)."""
    config = ServeConfig(
        bundle=str(served["bundle"]),
        run=str(served["run"]),
        admin=True,
        experts_dir=str(served["experts"]),
        work=str(tmp_path / "work"),
    )
    with server(config) as running:

        async def scenario():
            answers, done = [], asyncio.Event()
            async with httpx.AsyncClient(base_url=running.url, timeout=300) as client:

                async def admin():
                    assert (await client.post("/v1/domains", json={"expert": "tech"})).status_code == 401
                    wrong = {"authorization": "Bearer " + "x" * len(TOKEN)}
                    assert (await client.post("/v1/domains", json={"expert": "tech"}, headers=wrong)).status_code == 401
                    bad = await client.post("/v1/domains", json={"expert": "../run"}, headers=AUTH)
                    assert bad.status_code == 422
                    missing = await client.post("/v1/domains", json={"expert": "nope"}, headers=AUTH)
                    assert missing.status_code == 422 and "no expert directory" in missing.json()["error"]["message"]
                    added = await client.post("/v1/domains", json={"expert": "tech"}, headers=AUTH)
                    assert added.status_code == 200, added.text
                    assert "tech" in added.json()["model"]["domains"] and added.json()["model"]["version"] == 2
                    removed = await client.delete("/v1/domains/banking", headers=AUTH)
                    assert removed.status_code == 200, removed.text
                    assert "banking" not in removed.json()["model"]["domains"]
                    assert (await client.delete("/v1/domains/banking", headers=AUTH)).status_code == 404
                    await asyncio.sleep(0.2)
                    done.set()

                async def user(seed):
                    rng = random.Random(seed)
                    while not done.is_set():
                        texts = rng.sample(QUERIES, rng.randint(1, 3))
                        answers.append(await client.post("/v1/predict", json={"texts": texts}))
                        await asyncio.sleep(0.01)

                await asyncio.gather(admin(), *(user(s) for s in range(4)))
            return answers

        answers = asyncio.run(scenario())
        info = httpx.get(running.url + "/v1/info").json()
    assert info["version"] == 3 and "tech" in info["domains"] and "banking" not in info["domains"]
    domains_of = {1: None, 2: None, 3: set(info["domains"])}
    versions = set()
    for response in answers:
        assert response.status_code == 200
        body = response.json()
        version = body["model"]["version"]
        versions.add(version)
        named = {frozenset(p["weights"]) for p in body["predictions"]}
        assert len(named) == 1  # one model answered the whole request
        if domains_of[version] is not None:
            assert set(next(iter(named))) == domains_of[version]
    assert versions == {1, 2, 3}, versions  # queries were answered before, between and after the swaps

    with server(ServeConfig(bundle=str(served["bundle"]), admin=True, experts_dir=str(served["experts"]))) as running:
        refused = httpx.post(running.url + "/v1/domains", json={"expert": "tech"}, headers=AUTH, timeout=60)
    assert refused.status_code == 409 and "serve the run" in refused.json()["error"]["message"]


def test_serve_cli_refuses_what_it_cannot_do_in_one_line(served, capsys):
    code, _, err = run_cli(["serve", "--bundle", served["bundle"], "--workers", "2", "--experts-dir", "x"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "admin routes" in err
    code, _, err = run_cli(["serve", "--bundle", served["bundle"], "--max-batch", "0"], capsys)
    assert code == 2 and err.strip() == "redkit: error: --max-batch 0: must be at least 1"
