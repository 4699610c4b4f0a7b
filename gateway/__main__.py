"""`python -m gateway` is the `ultraroute` command."""

import sys

from gateway.cli import main

sys.exit(main())
