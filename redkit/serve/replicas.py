"""`redkit serve --ray [--replicas N]`: the same app as N Ray Serve replicas (`pip install 'redkit[ray]'`).

Each replica is a Ray actor that builds the app (redkit/serve/main.py `create`) and loads the bundle
itself; Ray's HTTP proxy spreads requests over them. On one machine this is what `--workers N`
does with processes; on a Ray cluster (`ray start --head`, then this command with RAY_ADDRESS set)
the replicas spread over the cluster's machines, each of which must see the bundle's path. Admin
routes are off with more than one replica, as with workers: a domain added to one replica would be
missing in the others.
"""

import os
from dataclasses import asdict

from redkit.errors import RedkitError
from redkit.serve.main import TOKEN_ENV, ServeConfig


def serve_with_ray(config: ServeConfig, replicas: int) -> None:
    try:
        import ray
        from ray import serve
    except ImportError:
        raise RedkitError("redkit serve --ray needs Ray Serve: pip install 'redkit[ray]'") from None
    if replicas < 1:
        raise RedkitError(f"--replicas {replicas}: must be at least 1")
    if config.admin and replicas > 1:
        raise RedkitError(
            "admin routes with --replicas > 1: a domain added to one replica would be missing in the others"
        )
    settings = asdict(config)
    # Replicas are Ray's processes, not children of this one: what they need of the environment is handed over.
    env = {"TOKENIZERS_PARALLELISM": "false"} | ({TOKEN_ENV: os.environ[TOKEN_ENV]} if config.admin else {})

    @serve.deployment(num_replicas=replicas, ray_actor_options={"num_cpus": 0, "runtime_env": {"env_vars": env}})
    @serve.ingress(_app(settings))
    class Redkit:
        """One replica: the app of `settings`, its model loaded when the replica starts."""

    ray.init(ignore_reinit_error=True, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": config.host, "port": config.port})
    serve.run(Redkit.bind(), name="redkit", route_prefix="/", blocking=True)


def _app(settings: dict):
    """The FastAPI app, built from plain settings (what Ray ships to each replica)."""
    from redkit.serve.main import create

    return create(ServeConfig(**settings))
