"""`redkit serve`: the app under uvicorn, the model loaded once per process.

    redkit serve --bundle BUNDLE [--host 127.0.0.1] [--port 8000] [--workers 1]
    redkit serve --run RUN --admin-token-env REDKIT_ADMIN_TOKEN --experts-dir EXPERTS   (domains added at run time)
    redkit serve --run RUN --owner-tokens OWNERS.json --ssl-certfile CERT --ssl-keyfile KEY   (owners' own tokens,
                 each hashed in OWNERS.json: redkit/serve/tokens.py; HTTPS)

--run exports the run's bundle (with its serving graph) once, into WORK/v1/bundle, and serves it;
the run stays behind it, so that a domain can be added or removed (redkit/serve/lifecycle.py).
With N workers each process loads its own copy and answers on the same port (the kernel spreads
the connections); admin routes are then off, since a swap would change one worker of N.
"""

import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path

from redkit.errors import RedkitError
from redkit.federated.upload import SIZE_LIMIT
from redkit.serve.tokens import MIN_LENGTH, read_owner_tokens

ENV = "REDKIT_SERVE_CONFIG"  # the settings, as JSON, for uvicorn's worker processes (which rebuild the app)
TOKEN_ENV = "REDKIT_ADMIN_TOKEN"  # where the admin token is read from by default (a flag would show in `ps`)


@dataclass
class ServeConfig:
    bundle: str  # what is served (for --run: the bundle exported from it)
    run: str | None = None  # the run behind the bundle, where there is one (admin routes need it)
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1
    max_batch: int = 64  # texts per request, and per model call
    max_chars: int = 2000  # per text
    max_body_bytes: int = 1_000_000
    max_upload_bytes: int = SIZE_LIMIT  # an owner's uploaded contribution (POST /v1/domains, admin only)
    batch_wait_ms: float = 0.0  # measured best: a busy model batches the requests that arrive meanwhile anyway
    threads: int | None = None  # ONNX Runtime's intra-op threads (default: every core)
    admin: bool = False  # admin routes on (the token itself travels in TOKEN_ENV, never in this config)
    experts_dir: str | None = None
    work: str | None = None
    owner_tokens: str | None = None  # a JSON file {owner: "sha256:<hex>"}: each owner's own token (admin routes)
    ssl_certfile: str | None = None  # HTTPS: uvicorn's certificate chain (PEM), and its key where not in it
    ssl_keyfile: str | None = None

    def __post_init__(self):
        for name in ("port", "workers", "max_batch", "max_chars", "max_body_bytes", "max_upload_bytes"):
            if getattr(self, name) < (0 if name == "port" else 1):
                raise RedkitError(f"--{name.replace('_', '-')} {getattr(self, name)}: must be at least 1")
        if self.batch_wait_ms < 0 or (self.threads is not None and self.threads < 1):
            raise RedkitError("--batch-wait-ms must be >= 0 and --threads >= 1")


def bundle_of_run(run: Path, work: Path, print_fn=print) -> Path:
    """WORK/v1/bundle: the run exported once (with its serving graph), reused by later starts."""
    from redkit.bundle.export import export_bundle
    from redkit.plugins import load_plugins

    bundle = work / "v1" / "bundle"
    if not (bundle / "manifest.json").is_file():
        load_plugins()
        print_fn(f"exporting {run} to {bundle} (once)")
        export_bundle(run, bundle)
    return bundle


def create(config: ServeConfig):
    """The FastAPI app of `config` (the admin token from the environment)."""
    import logging
    import tempfile

    from redkit.serve.app import create_app
    from redkit.serve.lifecycle import DomainChanges
    from redkit.serve.predictor import BundlePredictor

    def factory():
        source = Path(config.run) if config.run else None
        return BundlePredictor.open(config.bundle, source_run=source, threads=config.threads)

    return create_app(
        factory,
        max_batch=config.max_batch,
        max_chars=config.max_chars,
        max_body_bytes=config.max_body_bytes,
        max_upload_bytes=config.max_upload_bytes,
        batch_wait_ms=config.batch_wait_ms,
        admin_token=os.environ.get(TOKEN_ENV) if config.admin else None,
        owner_tokens=read_owner_tokens(Path(config.owner_tokens)) if config.owner_tokens else None,
        domain_changes=DomainChanges(
            Path(config.experts_dir) if config.experts_dir else None,
            Path(config.work) if config.work else Path(tempfile.mkdtemp(prefix="redkit-serve-")),
            logging.getLogger("redkit.serve").info,
            config.max_upload_bytes,
        ),
    )


def app_from_env():
    """uvicorn's factory in each worker process: `uvicorn redkit.serve.main:app_from_env --factory`."""
    import json

    return create(ServeConfig(**json.loads(os.environ[ENV])))


def serve(config: ServeConfig) -> None:
    import json

    import uvicorn

    if config.admin and not os.environ.get(TOKEN_ENV):
        raise RedkitError(f"admin routes need a token: set {TOKEN_ENV} (or --admin-token-env NAME)")
    if config.admin and len(os.environ[TOKEN_ENV]) < MIN_LENGTH:
        raise RedkitError(f"{TOKEN_ENV}: an admin token needs at least {MIN_LENGTH} characters")
    if config.owner_tokens and not config.admin:
        raise RedkitError("--owner-tokens needs the admin routes: set an admin token (--admin-token-env NAME)")
    if config.owner_tokens:
        read_owner_tokens(Path(config.owner_tokens))  # here, in one line, rather than in each worker's traceback
    check_tls(config)
    if config.admin and config.workers > 1:
        raise RedkitError(
            "admin routes with --workers > 1: a domain added to one worker would be missing in the others"
        )
    os.environ[ENV] = json.dumps(asdict(config))
    # This process is a top: the tokenizer's own thread pool would only fight ONNX Runtime's for the cores.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    uv = uvicorn.Config(
        "redkit.serve.main:app_from_env",
        factory=True,
        host=config.host,
        port=config.port,
        workers=config.workers,
        log_level="info",
        access_log=False,  # a log line per request costs more CPU than the model at high rates
        timeout_graceful_shutdown=30,
        ssl_certfile=config.ssl_certfile,
        ssl_keyfile=config.ssl_keyfile,
    )
    if config.workers > 1:
        serve_multiprocess(uv)
    else:
        uvicorn.Server(uv).run()


def check_tls(config: ServeConfig) -> None:
    """The certificate and key load (uvicorn would otherwise fail in its own way, in each worker)."""
    import ssl

    if config.ssl_keyfile and not config.ssl_certfile:
        raise RedkitError("--ssl-keyfile needs --ssl-certfile (the certificate the key is for)")
    if not config.ssl_certfile:
        return
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(config.ssl_certfile, config.ssl_keyfile)
    except OSError as err:  # ssl.SSLError is one
        key = f" --ssl-keyfile {config.ssl_keyfile}" if config.ssl_keyfile else ""
        raise RedkitError(
            f"--ssl-certfile {config.ssl_certfile}{key}: not a certificate and its key ({err.strerror or err})"
        ) from None


def serve_multiprocess(config) -> None:
    """What `uvicorn.run(..., workers=N)` does, minus uvicorn issue #3149 (open in 0.54.0).

    For N > 1 uvicorn binds the listening socket itself with proto=0; accepted sockets inherit it, and asyncio
    only turns on TCP_NODELAY when proto == IPPROTO_TCP, so every keep-alive response after the first waits
    ~40 ms for the client's delayed ACK (measured: p50 48 ms instead of 5 ms). Re-wrapping the same fd with
    IPPROTO_TCP fixes it. Drop this (and call uvicorn.run) once uvicorn sets the proto itself.
    """
    from uvicorn.supervisors import Multiprocess

    sock = config.bind_socket()
    if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.proto != socket.IPPROTO_TCP:
        sock = socket.socket(sock.family, sock.type, socket.IPPROTO_TCP, fileno=sock.detach())
    Multiprocess(config, sockets=[sock]).run()
