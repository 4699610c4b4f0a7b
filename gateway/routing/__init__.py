"""Stage 3, select: which endpoints may serve a request, in what order, and why.

    filters.py   hard filters: what may serve at all (catalogue, request, preferences)
    figures.py   what each endpoint is ranked by: predicted speed at its load, TTFT, price
    speed.py     speed against load per endpoint (fitted online), capacity learned from 429s
    curve.py     the fits made a curve, and what a request is predicted to get from it
    tiers.py     speed tiers: which tiers a request may use, and in what order
    ranking.py   ordering within and across tiers: sort keys, spills, soft thresholds, `order`
    sticky.py    prompt-cache affinity: a conversation stays on the endpoint that served it
    live.py      the live choice's per-request scores: curves fixed to a ranking's request shape
    router.py    the `Router`: puts it together per request, with the cached parts cached
"""
