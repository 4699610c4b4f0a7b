"""The `ultraroute` command: serve, keys, simulate, check, policies, stats, demo, bench.

Argument parsing only; each subcommand calls into the module that does the work.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gateway.config import ConfigError, load_catalogue, load_config
from gateway.policy import policies_dir

POLICIES_HELP = ("directory of named policies (default: policies/ beside the catalogue, else the built-in set; "
                 "'' for none)")


def _serve(args: argparse.Namespace) -> int:
    from gateway.access.command import refuse_without_keys
    from gateway.serve.workers import ServeOptions, load, serve

    # policies: None (not given) finds them beside the catalogue or built in; "" means none (workers.load)
    options = ServeOptions(config=args.config, policies=args.policies, open_access=args.open,
                           host=args.host, port=args.port, log_level=args.log_level,
                           worker_ports=args.worker_ports)
    config = load(options)
    refusal = refuse_without_keys(config, args.config)
    if refusal is not None:
        print(f"error: {refusal}", file=sys.stderr)
        return 2
    return serve(options, args.workers, config)


def _simulate(args: argparse.Namespace) -> int:
    from gateway.simulator import SimConfigError, run

    try:
        run(Path(args.config))
    except (SimConfigError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def _check(args: argparse.Namespace) -> int:
    from gateway.observability.report import print_catalogue

    catalogue, _ = load_catalogue(Path(args.file))
    print_catalogue(catalogue, args.file)
    return 0


def _policies(args: argparse.Namespace) -> int:
    from gateway.observability.report import print_policies
    from gateway.policy import load_policies

    directory = policies_dir(args.dir or None, Path(args.config))
    assert directory is not None  # only "" means none, and it is read as "not given" here
    print(f"policies from {directory}", file=sys.stderr)
    print_policies(load_policies(directory))
    return 0


def _stats(args: argparse.Namespace) -> int:
    from gateway.observability.report import watch_stats

    watch_stats(args.url, args.interval, once=args.once)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from gateway.demo import run_demo

    return run_demo(port=args.port, warmup=not args.no_warmup)


def _keys(args: argparse.Namespace) -> int:
    from gateway.access.command import run

    config = load_config(Path(args.config), policies_dir(args.policies, Path(args.config)))
    return run(config, args)


def _bench(args: argparse.Namespace) -> int:
    from gateway.bench.command import run

    return run(args)


def _workers(value: str) -> int:
    from gateway.serve.workers import worker_count

    try:
        return worker_count(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number or 'auto', not {value!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ultraroute", description="A speed-aware routing gateway.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the gateway")
    serve.add_argument("--config", default="providers.yaml")
    serve.add_argument("--policies", default=None, help=POLICIES_HELP)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--log-level", default="warning")
    serve.add_argument("--open", action="store_true",
                       help="serve without client keys (anyone who can reach the port may spend); "
                       "also ULTRAROUTE_OPEN=1")
    serve.add_argument("--workers", type=_workers, default=1, metavar="N|auto",
                       help="worker processes, each a replica (auto: one per core); share state through "
                       "REDIS_URL")
    serve.add_argument("--worker-ports", type=int, default=None, metavar="FIRST",
                       help="worker i also answers on port FIRST+i: scrape each worker's /metrics there")
    serve.set_defaults(func=_serve)

    simulate = sub.add_parser("simulate", help="run simulated OpenAI-compatible providers")
    simulate.add_argument("--config", default="sim.yaml")
    simulate.set_defaults(func=_simulate)

    check = sub.add_parser("check", help="validate a catalogue and print it")
    check.add_argument("file", nargs="?", default="providers.yaml")
    check.set_defaults(func=_check)

    policies = sub.add_parser("policies", help="validate and list the named policies")
    policies.add_argument("--dir", default=None, help=POLICIES_HELP)
    policies.add_argument("--config", default="providers.yaml", help="the catalogue whose policies/ to look beside")
    policies.set_defaults(func=_policies)

    stats = sub.add_parser("stats", help="live per-endpoint stats of a running gateway")
    stats.add_argument("--url", default="http://127.0.0.1:8080")
    stats.add_argument("--interval", type=float, default=1.0)
    stats.add_argument("--once", action="store_true", help="print one table and exit")
    stats.set_defaults(func=_stats)

    demo = sub.add_parser("demo", help="simulated providers + gateway + warm-up traffic")
    demo.add_argument("--port", type=int, default=8080)
    demo.add_argument("--no-warmup", action="store_true")
    demo.set_defaults(func=_demo)

    from gateway.access.command import add_arguments as add_keys_arguments

    keys = sub.add_parser("keys", help="create, list and revoke client API keys; read their spend")
    add_keys_arguments(keys)
    keys.set_defaults(func=_keys)

    from gateway.bench.options import add_arguments as add_bench_arguments

    bench = sub.add_parser("bench", help="measure speed and cost per concurrency level, before paying")
    add_bench_arguments(bench)
    bench.set_defaults(func=_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
