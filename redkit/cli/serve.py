"""`redkit serve --bundle BUNDLE | --run RUN [--host --port --workers ...]`: the model over HTTP
(redkit/serve). Needs the serve extra: pip install 'redkit[serve]'.

`redkit hash-token [--token-env NAME]`: the "sha256:<hex>" of a token (read from stdin, or NAME), the value of
its owner's key in the JSON file `redkit serve --owner-tokens FILE` reads."""

import argparse
import os
from pathlib import Path

from redkit.cli.command import command
from redkit.errors import RedkitError
from redkit.federated.upload import SIZE_LIMIT


def _options(p: argparse.ArgumentParser) -> None:
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--bundle", type=Path, help="a bundle written by `redkit export` (its serving graph answers)")
    source.add_argument(
        "--run", type=Path, help="a trained run: exported once into --work, and kept for domain changes"
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=int, default=1, help="processes, each with its own copy of the model")
    p.add_argument("--max-batch", type=int, default=64, help="texts per request and per model call")
    p.add_argument("--max-chars", type=int, default=2000, help="characters per text")
    p.add_argument("--max-body-bytes", type=int, default=1_000_000)
    p.add_argument(
        "--max-upload-bytes",
        type=int,
        default=SIZE_LIMIT,
        help="an owner's contribution uploaded to POST /v1/domains: its body, and its files as its manifest gives them "
        "(their sizes before the compact form they travel in)",
    )
    p.add_argument("--batch-wait-ms", type=float, default=0.0, help="how long a batch waits for more requests")
    p.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads per process (default: every core)")
    p.add_argument(
        "--admin-token-env",
        default=None,
        metavar="NAME",
        help="turn on POST/DELETE /v1/domains (experts by name, owners' uploaded contributions), with the bearer "
        "token in environment variable NAME (REDKIT_ADMIN_TOKEN by default when --experts-dir is given)",
    )
    p.add_argument("--experts-dir", type=Path, default=None, help="where POST /v1/domains finds experts by name")
    p.add_argument(
        "--owner-tokens",
        type=Path,
        default=None,
        metavar="FILE",
        help='JSON {"owner": "sha256:<hex>"}: each data owner\'s own token (`redkit hash-token`), which uploads and '
        "removes only that owner's domains (the admin token still does everything)",
    )
    p.add_argument("--ssl-certfile", type=Path, default=None, help="HTTPS: the certificate chain (PEM)")
    p.add_argument("--ssl-keyfile", type=Path, default=None, help="HTTPS: its private key (PEM), unless in the chain")
    p.add_argument("--work", type=Path, default=None, help="where --run's bundle and new versions go (RUN.serve/)")
    p.add_argument("--ray", action="store_true", help="serve as Ray Serve replicas instead (pip install 'redkit[ray]')")
    p.add_argument("--replicas", type=int, default=2, help="with --ray: how many replicas")


@command("serve", options=_options, help="serve a bundle or a run over HTTP (FastAPI + uvicorn)", plugins=False)
def run(args) -> None:
    try:
        from redkit.serve.main import TOKEN_ENV, ServeConfig, bundle_of_run, serve
    except ImportError as err:
        raise RedkitError(
            f"redkit serve needs the serve extra ({err.name} is missing): pip install 'redkit[serve]'"
        ) from None
    if args.admin_token_env:
        token = os.environ.get(args.admin_token_env)
        if not token:
            raise RedkitError(f"--admin-token-env {args.admin_token_env}: that environment variable is not set")
        os.environ[TOKEN_ENV] = token
    admin = bool(args.admin_token_env or args.experts_dir or args.owner_tokens)
    if args.ray and (args.ssl_certfile or args.ssl_keyfile):
        raise RedkitError("--ssl-certfile with --ray: Ray Serve's proxy serves plain HTTP; put TLS in front of it")
    work = args.work or (args.run.with_name(args.run.name + ".serve") if args.run else None)
    bundle = bundle_of_run(args.run, work) if args.run else args.bundle
    config = ServeConfig(
        bundle=str(bundle),
        run=str(args.run) if args.run else None,
        host=args.host,
        port=args.port,
        workers=args.workers,
        max_batch=args.max_batch,
        max_chars=args.max_chars,
        max_body_bytes=args.max_body_bytes,
        max_upload_bytes=args.max_upload_bytes,
        batch_wait_ms=args.batch_wait_ms,
        threads=args.threads,
        admin=admin,
        experts_dir=str(args.experts_dir) if args.experts_dir else None,
        work=str(work) if work else None,
        owner_tokens=str(args.owner_tokens) if args.owner_tokens else None,
        ssl_certfile=str(args.ssl_certfile) if args.ssl_certfile else None,
        ssl_keyfile=str(args.ssl_keyfile) if args.ssl_keyfile else None,
    )
    if args.ray:
        from redkit.serve.replicas import serve_with_ray

        serve_with_ray(config, args.replicas)
    else:
        serve(config)


def _hash_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--token-env", metavar="NAME", default=None, help="the token's environment variable (default: stdin)"
    )


@command(
    "hash-token",
    options=_hash_options,
    help="the sha256 line of a token for `redkit serve --owner-tokens`",
    plugins=False,
)
def hash_token(args) -> None:
    import sys

    from redkit.serve.tokens import MIN_LENGTH, token_hash

    token = os.environ.get(args.token_env, "") if args.token_env else sys.stdin.readline().rstrip("\r\n")
    if len(token) < MIN_LENGTH or token != token.strip():
        raise RedkitError(f"a token needs at least {MIN_LENGTH} characters, and no space at either end")
    print(token_hash(token))
