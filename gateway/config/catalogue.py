"""The resolved catalogue the rest of the gateway uses: one flat `Endpoint` per (model, endpoint), with
the provider's defaults applied and its key looked up from the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import SecretStr, ValidationError

from gateway.config.files import (
    AdvertisedFile,
    CatalogueFile,
    GatewayFile,
    PriceFile,
    RateLimitsFile,
    SessionsFile,
    SloFile,
    Tier,
)
from gateway.configfile import ConfigError, format_validation_error, read_yaml


@dataclass(frozen=True, slots=True)
class Provider:
    name: str
    base_url: str
    region: str
    data_collection: str
    headers: Mapping[str, str]
    api_key: SecretStr | None  # SecretStr so that no repr or log line can show it
    key_missing: bool  # api_key_env is set but the variable is not
    max_connections: int
    max_keepalive_connections: int
    connect_timeout_s: float
    rate_limits: RateLimitsFile | None = None
    api: str = "openai"  # the wire API it speaks (ProviderApi)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One way to serve one public model: a provider, an upstream model id and a tier."""

    key: str  # "<public model>/<endpoint id>", unique across the catalogue
    id: str  # unique within the model, e.g. "fireworks/standard"
    model: str  # the public model name
    provider: Provider
    upstream_model: str
    tier: Tier
    price: PriceFile | None
    hourly_cost: float | None
    quantization: str | None
    region: str
    context_length: int | None
    max_output_tokens: int | None
    max_concurrency: int | None
    advertised: AdvertisedFile
    capabilities: frozenset[str]
    extra_body: Mapping[str, Any]
    slo: SloFile | None = None
    first_token_budget_s: float | None = None
    stream_usage: bool = True
    apis: frozenset[str] = frozenset({"chat"})  # the upstream APIs it serves
    max_uncached_input_tokens: int | None = None
    service_tier: str | None = None  # the provider's speed tier asked for (EndpointFile.service_tier)
    # Price per service tier of the same provider and upstream model, as the catalogue lists them:
    # an answer is charged at the tier that served. Empty unless the catalogue lists several.
    tier_prices: Mapping[str, PriceFile] = field(default_factory=dict)

    @property
    def api(self) -> str:
        """The wire API its provider speaks: openai, anthropic or openai-responses."""
        return self.provider.api

    @property
    def available(self) -> bool:
        return not self.provider.key_missing


@dataclass(frozen=True, slots=True)
class Catalogue:
    models: Mapping[str, tuple[Endpoint, ...]]  # public name -> endpoints in catalogue order
    aliases: Mapping[str, str]  # alias -> public name
    providers: Mapping[str, Provider]

    def resolve_model(self, name: str) -> str | None:
        """The public model name for a name or alias, or None."""
        if name in self.models:
            return name
        return self.aliases.get(name)

    def endpoints(self) -> tuple[Endpoint, ...]:
        return tuple(e for eps in self.models.values() for e in eps)



def parse_catalogue(data: Any, source: str) -> CatalogueFile:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: (top level): must be a mapping with 'providers' and 'models'")
    try:
        return CatalogueFile.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(source, err)) from None


def build_catalogue(file: CatalogueFile, source: str, env: Mapping[str, str]) -> Catalogue:
    """Resolve providers (keys from `env`) and check what pydantic cannot: references and uniqueness."""
    problems: list[str] = []
    providers: dict[str, Provider] = {}
    for name, p in file.providers.items():
        key = env.get(p.api_key_env) if p.api_key_env else None
        providers[name] = Provider(
            name=name,
            base_url=p.base_url.rstrip("/"),
            region=p.region,
            data_collection=p.data_collection,
            headers=dict(p.headers),
            api_key=SecretStr(key) if key else None,
            key_missing=bool(p.api_key_env) and not key,
            max_connections=p.max_connections,
            max_keepalive_connections=p.max_keepalive_connections,
            connect_timeout_s=p.connect_timeout_s,
            rate_limits=p.rate_limits,
            api=p.api,
        )

    models: dict[str, tuple[Endpoint, ...]] = {}
    aliases: dict[str, str] = {}
    for model_name, m in file.models.items():
        seen: set[str] = set()
        endpoints: list[Endpoint] = []
        for i, e in enumerate(m.endpoints):
            where = f"{source}: models.{model_name}.endpoints[{i}]"
            provider = providers.get(e.provider)
            if provider is None:
                problems.append(f"{where}.provider: unknown provider '{e.provider}'")
                continue
            endpoint_id = e.id or f"{e.provider}/{e.tier.value}"
            if endpoint_id in seen:
                problems.append(f"{where}.id: '{endpoint_id}' is not unique within the model; set `id`")
                continue
            seen.add(endpoint_id)
            if provider.api != "openai" and e.apis != {"chat"}:
                # Legacy completions and embeddings exist only in OpenAI's own API.
                problems.append(f"{where}.apis: a provider with api '{provider.api}' serves chat only")
                continue
            endpoints.append(
                Endpoint(
                    key=f"{model_name}/{endpoint_id}",
                    id=endpoint_id,
                    model=model_name,
                    provider=provider,
                    upstream_model=e.model,
                    tier=e.tier,
                    price=e.price,
                    hourly_cost=e.hourly_cost,
                    quantization=e.quantization,
                    region=e.region or provider.region,
                    context_length=e.context_length,
                    max_output_tokens=e.max_output_tokens,
                    max_concurrency=e.max_concurrency,
                    advertised=e.advertised,
                    capabilities=frozenset(e.capabilities),
                    extra_body=dict(e.extra_body),
                    slo=e.slo,
                    first_token_budget_s=e.first_token_budget_s,
                    stream_usage=e.stream_usage,
                    apis=frozenset(e.apis),
                    service_tier=e.service_tier,
                    max_uncached_input_tokens=e.max_uncached_input_tokens,
                )
            )
        models[model_name] = tuple(endpoints)
        for j, alias in enumerate(m.aliases):
            if alias in file.models or (alias in aliases and aliases[alias] != model_name):
                problems.append(f"{source}: models.{model_name}.aliases[{j}]: '{alias}' names another model")
            aliases[alias] = model_name
    if problems:
        raise ConfigError("\n".join(problems))
    return Catalogue(models=_with_tier_prices(models), aliases=aliases, providers=providers)


# The tier a provider reports when none was asked for.
DEFAULT_SERVICE_TIER = {"anthropic": "standard", "openai": "default", "openai-responses": "default"}


def served_tier_name(endpoint: Endpoint) -> str:
    return endpoint.service_tier or DEFAULT_SERVICE_TIER[endpoint.provider.api]


def _with_tier_prices(models: dict[str, tuple[Endpoint, ...]]) -> dict[str, tuple[Endpoint, ...]]:
    """Each endpoint told the prices of its provider's other service tiers of the same model."""
    prices: dict[tuple[str, str], dict[str, PriceFile]] = {}
    for endpoints in models.values():
        for e in endpoints:
            if e.price is not None:
                prices.setdefault((e.provider.name, e.upstream_model), {})[served_tier_name(e)] = e.price
    return {name: tuple(replace(e, tier_prices=prices[(e.provider.name, e.upstream_model)])
                        if len(prices.get((e.provider.name, e.upstream_model), ())) > 1 else e for e in endpoints)
            for name, endpoints in models.items()}


def load_catalogue(path: Path, env: Mapping[str, str] | None = None) -> tuple[Catalogue, GatewayFile]:
    catalogue, gateway, _ = load_catalogue_file(path, env)
    return catalogue, gateway


def load_catalogue_file(path: Path, env: Mapping[str, str] | None = None
                        ) -> tuple[Catalogue, GatewayFile, SessionsFile]:
    env = os.environ if env is None else env
    file = parse_catalogue(read_yaml(path), path.name)
    return build_catalogue(file, path.name, env), file.gateway, file.sessions
