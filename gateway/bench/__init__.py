"""`ultraroute bench`: measure the speed and the cost of endpoints or tiers before paying for them.

Sweeps concurrency levels against OpenAI-compatible targets (a base_url directly, or the gateway with
`speed`/`provider.only` per tier), streaming bundled coding prompts, and reports per level: per-user
decode rate, TTFT, time to first answer token, end-to-end latency, aggregate throughput, error rate
and cost per 1M output tokens, plus an A-vs-B verdict, as a terminal table, JSON, CSV and a PNG chart.

Modules, one job each (read `command.py` first, it composes them):

    options.py    argparse arguments of the subcommand (light: imported when the CLI parser is built)
    targets.py    Target: name + base_url + model + extra body + key env + pricing; spec/YAML parsing
    catalogue.py  prices taken from a gateway catalogue by endpoint id, `only` or `speed`
    prompts.py    the bundled prompts (prompts.yaml) or a user's file, in a fixed order
    stream.py     one streamed request, timed on arrival -> RequestResult
    runner.py     async load generation: levels x targets, N requests per level, c in flight
    stats.py      percentiles (pure)
    cost.py       Pricing and cost per 1M output tokens, per-token or hourly (pure)
    metrics.py    a level's RequestResults -> LevelStats
    compare.py    A vs B per level and the one-line verdict
    models.py     the frozen result records
    writers.py    JSON and CSV files
    chart.py      the PNG chart (matplotlib, Agg)
    table.py      the rich table and the live progress bar
    command.py    `ultraroute bench` end to end, and its exit code

This package does not route, and imports nothing heavy at package level, so that building the CLI
parser stays cheap.
"""
