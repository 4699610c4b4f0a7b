"""`python -m gateway.simulator CONFIG.yaml`: run the simulator in the foreground.

Does: parse the one argument and call `run()`. Config errors print to stderr and exit 2; a port
that cannot be bound prints to stderr and exits 1.
Does not: anything `ultraroute simulate` would not also do.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gateway.simulator.config import SimConfigError
from gateway.simulator.server import run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.simulator", description=__doc__)
    parser.add_argument("config", type=Path, help="simulator config (sim.yaml)")
    args = parser.parse_args(argv)
    try:
        run(args.config)
    except SimConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # typically: a configured port is already in use
        print(f"error: cannot listen: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
