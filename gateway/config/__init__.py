"""The configuration: the endpoint catalogue (`providers.yaml`), the named policies and the
environment, as frozen models, loaded once.

`load_config()` is the only place that reads the catalogue file and the environment (provider keys,
`REDIS_URL`). Every error names the file and the key path, e.g.
`providers.yaml: models.deepseek-v4.1-flash.endpoints[1].price.output: must be >= 0`.

    files.py       the file models (`CatalogueFile` and below), mirroring the YAML
    catalogue.py   `Catalogue`, the resolved form the rest of the gateway uses: one flat `Endpoint` per
                   (model, endpoint), with the provider's defaults applied and its key looked up
    __init__.py    `Config` (everything together) and `load_config()`

This package does not route, validate requests or talk to providers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import SecretStr

from gateway.config.catalogue import (
    Catalogue,
    Endpoint,
    Provider,
    build_catalogue,
    load_catalogue,
    load_catalogue_file,
    parse_catalogue,
)
from gateway.config.files import (
    GatewayFile,
    HealthFile,
    PriceFile,
    RetryFile,
    SessionsFile,
    Tier,
)
from gateway.configfile import ConfigError, read_yaml
from gateway.policy import PolicySet, load_policies
from gateway.redisconn import parse_redis_url

__all__ = [
    "Catalogue", "Config", "ConfigError", "Endpoint", "GatewayFile", "PriceFile", "Provider", "SessionsFile",
    "Tier", "build_catalogue", "load_catalogue", "load_catalogue_file", "load_config", "parse_catalogue",
]


@dataclass(frozen=True, slots=True)
class Config:
    """Everything the gateway is configured with, loaded once at start."""

    catalogue: Catalogue
    policies: PolicySet
    gateway: GatewayFile = field(default_factory=GatewayFile)
    health: HealthFile = field(default_factory=HealthFile)
    retry: RetryFile = field(default_factory=RetryFile)
    sessions: SessionsFile = field(default_factory=SessionsFile)
    redis_url: str | None = None
    source: str = "providers.yaml"
    open_access: bool = False  # no client keys: only with `serve --open` or ULTRAROUTE_OPEN=1
    admin_key: SecretStr | None = None  # ULTRAROUTE_ADMIN_KEY: unset, the admin API is off
    keys_file: Path = Path("keys.json")
    worker: int | None = None  # this process's index under `serve --workers N` (N > 1)
    # Where it was read from, so that a reload (SIGHUP, POST /admin/reload) reads the same files.
    catalogue_path: Path | None = None
    policies_dir: Path | None = None

    @property
    def spend_file(self) -> Path:
        """Without Redis, client keys' spend is kept here, beside the keys; one file per worker, since
        each keeps its own (worker 0 and a single process share the plain name)."""
        suffix = f".worker-{self.worker}" if self.worker else ""
        return self.keys_file.with_name(f"{self.keys_file.stem}.spend{suffix}.json")


MIN_ADMIN_KEY_CHARS = 24


def load_config(
    catalogue_path: Path,
    policies_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    open_access: bool = False,
) -> Config:
    """Load the catalogue, the named policies and the environment's settings, once, at start.

    Environment: provider keys (by the names the catalogue gives), `REDIS_URL`, `ULTRAROUTE_OPEN=1`
    (same as `open_access`), `ULTRAROUTE_ADMIN_KEY`."""
    env = os.environ if env is None else env
    file = parse_catalogue(read_yaml(catalogue_path), catalogue_path.name)
    catalogue, gateway = build_catalogue(file, catalogue_path.name, env), file.gateway
    policies = load_policies(policies_dir) if policies_dir is not None else PolicySet.builtin()
    redis_url = env.get("REDIS_URL") or None
    if redis_url is not None:
        parse_redis_url(redis_url)  # a malformed URL fails at start, not in a background task
    admin_key = env.get("ULTRAROUTE_ADMIN_KEY") or None
    if admin_key is not None and len(admin_key) < MIN_ADMIN_KEY_CHARS:
        raise ConfigError(f"ULTRAROUTE_ADMIN_KEY: must be at least {MIN_ADMIN_KEY_CHARS} characters "
                          "(e.g. `openssl rand -hex 24`)")
    return Config(
        catalogue=catalogue,
        policies=policies,
        gateway=gateway,
        health=file.health,
        retry=file.retry,
        sessions=file.sessions,
        redis_url=redis_url,
        source=catalogue_path.name,
        open_access=open_access or env.get("ULTRAROUTE_OPEN", "").lower() in ("1", "true", "yes"),
        admin_key=SecretStr(admin_key) if admin_key else None,
        keys_file=catalogue_path.parent / gateway.keys_file,
        catalogue_path=catalogue_path,
        policies_dir=policies_dir,
    )

