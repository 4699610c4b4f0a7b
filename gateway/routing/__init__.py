"""Stage 3, select: which endpoints may serve a request, in what order, and why.

`plan()` is the entry point; the filters, scoring and load awareness live in this package's modules.
"""

from gateway.routing.plan import plan

__all__ = ["plan"]
