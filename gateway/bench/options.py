"""The arguments of `ultraroute bench` (argparse only: imported whenever the CLI parser is built, so
it must stay free of heavy imports). Parsing the values they hold is `targets.py`'s job.
"""

from __future__ import annotations

import argparse

EPILOG = """\
targets: --target NAME[:key=value,...] with keys speed, only (repeatable), endpoint, base_url,
model, api_key_env, body.FIELD; or --targets FILE (YAML). Without either, one target named
"default" uses --base-url and --model.

examples:
  ultraroute bench --base-url https://api.example.com/v1 --model my-model --price default=0.30/1.20
  ultraroute bench --base-url http://127.0.0.1:8080/v1 --model deepseek-v4.1-flash \\
      --target ultra:speed=ultrafast --target std:speed=standard \\
      --price ultra=2.40/9.60 --price std=0.30/1.20 --compare ultra std --levels 1,4,16
  ultraroute bench --base-url http://127.0.0.1:8080/v1 --model deepseek-v4.1-flash \\
      --target ultra:speed=ultrafast,only=fireworks/ultrafast --target std:only=fireworks/standard \\
      --catalogue providers.yaml --compare ultra std

exit status: 0 when the run completed (failed requests are figures in the table), 1 when every
request of every target failed, 2 on bad arguments or files.
"""


def levels(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"levels must be integers separated by commas: {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"levels must be >= 1: {text!r}")
    return tuple(dict.fromkeys(values))  # keep the given order, drop repeats


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1: {text}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    where = parser.add_argument_group("what to measure")
    where.add_argument("--base-url", help="OpenAI-compatible root, e.g. http://127.0.0.1:8080/v1 "
                       "(default for targets)")
    where.add_argument("--model", help="model name sent (default for targets)")
    where.add_argument("--api-key-env", metavar="NAME",
                       help="env var holding the API key (default for targets)")
    where.add_argument("--target", action="append", default=[], metavar="SPEC",
                       help="NAME[:key=value,...]")
    where.add_argument("--targets", metavar="FILE", help="targets YAML file")
    price = parser.add_argument_group("pricing")
    price.add_argument("--price", action="append", default=[], metavar="NAME=IN/OUT",
                       help="USD per 1M input/output tokens, e.g. std=0.30/1.20")
    price.add_argument("--hourly-cost", action="append", default=[], metavar="NAME=USD",
                       help="USD per hour of rented capacity, e.g. dedicated=25")
    price.add_argument("--catalogue", metavar="FILE",
                       help="take prices from a gateway catalogue (providers.yaml)")
    price.add_argument("--compare", nargs=2, action="append", default=[], metavar=("A", "B"),
                       help="A's speed multiple against its price multiple, and a verdict (repeatable)")
    load = parser.add_argument_group("load")
    load.add_argument("--levels", type=levels, default=(1, 4, 16, 64),
                      help="concurrency levels (default 1,4,16,64)")
    load.add_argument("--requests", type=positive_int, default=32,
                      help="requests per level (default 32; a level of c runs at least c)")
    load.add_argument("--max-tokens", type=positive_int, default=256,
                      help="max_tokens of each request (default 256)")
    load.add_argument("--timeout", type=positive_float, default=120.0,
                      help="per-request deadline in seconds (default 120)")
    load.add_argument("--prompts", metavar="FILE",
                      help="prompts YAML (default: the bundled coding prompts)")
    output = parser.add_argument_group("output")
    output.add_argument("--out", default="bench-results", metavar="DIR",
                        help="directory for results.json, results.csv, chart.png (default bench-results)")
    output.add_argument("--no-progress", action="store_true", help="no live progress bar")
