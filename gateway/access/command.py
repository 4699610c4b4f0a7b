"""`ultraroute keys ...`: manage client keys in the store a gateway with the same catalogue and
environment uses (Redis when `REDIS_URL` is set, else the catalogue's `keys_file`), and the check
`ultraroute serve` makes before it starts (no client key: refuse to start, unless the admin API is on
to create one).

    keys create --name NAME [--models a,b] [--policy P] [--rpm N] [--tpm N] [--budget USD] [--period day|month]
    keys list
    keys revoke KEY_ID
    keys spend KEY_ID
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import UTC, datetime

from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from gateway.access.keys import KeySpec
from gateway.access.ledger import Ledger
from gateway.access.manage import create_key, revoke_key, spend_view
from gateway.access.store import KeyStore, KeyStoreError, open_key_store
from gateway.config import Config
from gateway.errors import GatewayError

HOW_TO_ADD_A_KEY = (
    "no client API keys: the gateway would refuse every request.\n"
    "  Create one:   ultraroute keys create --name my-app{config}\n"
    "  (it is stored hashed in {where}; the secret is printed once)\n"
    "  Or set ULTRAROUTE_ADMIN_KEY and create keys with POST /admin/keys once the gateway runs\n"
    "  Or serve without keys, on a trusted network only:   ultraroute serve --open   (or ULTRAROUTE_OPEN=1)"
)


def _store(config: Config) -> KeyStore:
    return open_key_store(config.redis_url, config.gateway.redis_key_prefix, config.keys_file)


def _where(config: Config) -> str:
    return "Redis (REDIS_URL)" if config.redis_url else str(config.keys_file)


async def _active_keys(config: Config) -> int:
    store = _store(config)
    try:
        return sum(1 for k in (await store.load()).values() if k.active)
    finally:
        await store.aclose()


def refuse_without_keys(config: Config, config_arg: str) -> str | None:
    """The message `serve` exits with when it is not open and has no key to accept; else None."""
    if config.open_access:
        return None
    try:
        count = asyncio.run(_active_keys(config))
    except KeyStoreError as err:
        return f"cannot read the client keys: {err}"
    if count:
        return None
    if config.admin_key is not None:  # an orchestrator's first start: keys come through the admin API
        print("warning: no client API keys yet: every request is refused (401) until one is created with "
              "POST /admin/keys (admin key) or `ultraroute keys create`", file=sys.stderr)
        return None
    flag = "" if config_arg == "providers.yaml" else f" --config {config_arg}"
    return HOW_TO_ADD_A_KEY.format(config=flag, where=_where(config))


def _csv(value: str | None) -> tuple[str, ...] | None:
    return tuple(v.strip() for v in value.split(",") if v.strip()) if value else None


def _when(ts: float | None) -> str:
    return "" if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M")


async def _create(config: Config, args: argparse.Namespace, out: Console) -> int:
    try:
        spec = KeySpec(name=args.name, models=_csv(args.models), policy=args.policy, rpm=args.rpm, tpm=args.tpm,
                       budget_usd=args.budget, budget_period=args.period)
    except ValidationError as err:
        first = err.errors()[0]
        print(f"error: --{first['loc'][0]}: {first['msg']}", file=sys.stderr)
        return 2
    store = _store(config)
    try:
        key, secret = await create_key(store, spec, config.catalogue, config.policies)
    finally:
        await store.aclose()
    out.print(f"created {key.id} ({key.name}) in {_where(config)}. The key, shown only this once:")
    print(secret)
    return 0


async def _list(config: Config, out: Console) -> int:
    store = _store(config)
    ledger = Ledger(config.redis_url, config.gateway.redis_key_prefix, spend_file=config.spend_file)
    try:
        await ledger.load_spend_file()
        keys = sorted((await store.load()).values(), key=lambda k: k.created_at)
        now = time.time()
        table = Table("id", "name", "key", "models", "policy", "rpm", "tpm", "budget", "spent", "created",
                      "revoked", title=f"client keys in {_where(config)}")
        for k in keys:
            spent = await ledger.read_spend(k, now)
            budget = "" if k.budget_usd is None else f"${k.budget_usd:g}/{k.budget_period}"
            table.add_row(k.id, k.name, k.hint, ",".join(k.models) if k.models else "all", k.policy or "",
                          str(k.rpm or ""), str(k.tpm or ""), budget, f"${spent:.6f}",
                          _when(k.created_at), _when(k.revoked_at))
        out.print(table)
    finally:
        await ledger.stop()
        await store.aclose()
    return 0


async def _revoke(config: Config, key_id: str, out: Console) -> int:
    store = _store(config)
    try:
        key = await revoke_key(store, key_id)
    finally:
        await store.aclose()
    out.print(f"revoked {key.id} ({key.name}) at {_when(key.revoked_at)} UTC; "
              "running gateways refuse it within keys_refresh_s")
    return 0


async def _spend(config: Config, key_id: str, out: Console) -> int:
    store = _store(config)
    ledger = Ledger(config.redis_url, config.gateway.redis_key_prefix, spend_file=config.spend_file)
    try:
        await ledger.load_spend_file()
        keys = await store.load()
        if key_id not in keys:
            print(f"error: no key with id {key_id}", file=sys.stderr)
            return 2
        now = time.time()
        out.print_json(spend_view(keys[key_id], await ledger.read_spend(keys[key_id], now), now).model_dump_json())
    finally:
        await ledger.stop()
        await store.aclose()
    return 0


def run(config: Config, args: argparse.Namespace) -> int:
    out = Console() if sys.stdout.isatty() else Console(width=200)
    try:
        if args.action == "create":
            return asyncio.run(_create(config, args, out))
        if args.action == "list":
            return asyncio.run(_list(config, out))
        if args.action == "revoke":
            return asyncio.run(_revoke(config, args.key_id, out))
        return asyncio.run(_spend(config, args.key_id, out))
    except (KeyStoreError, GatewayError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def add_arguments(keys: argparse.ArgumentParser) -> None:
    keys.add_argument("--config", default="providers.yaml", help="the catalogue the gateway is started with")
    keys.add_argument("--policies", default=None,
                      help="directory of named policies (default: policies/ beside the catalogue, else built-in)")
    actions = keys.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="create a key and print it (once)")
    create.add_argument("--name", required=True)
    create.add_argument("--models", help="comma-separated models or aliases this key may use (default: all)")
    create.add_argument("--policy", help="named policy for requests that name none")
    create.add_argument("--rpm", type=int, help="requests per minute")
    create.add_argument("--tpm", type=int, help="tokens per minute (prompt + completion)")
    create.add_argument("--budget", type=float, help="USD per period")
    create.add_argument("--period", choices=("day", "month"), default="month")
    actions.add_parser("list", help="list keys (never their secrets)")
    revoke = actions.add_parser("revoke", help="revoke a key")
    revoke.add_argument("key_id")
    spend = actions.add_parser("spend", help="a key's spend this period")
    spend.add_argument("key_id")
