"""Endpoint health: which endpoints may be tried now, and how this replica learns it.

    board     `HealthBoard`: circuit breakers, rate-limit cool-downs, SLO demotion, misconfiguration
    probe     background probes of open circuits (one at a time across replicas), so a recovery is seen
    share     sharing circuits, demotions and cool-downs with the other replicas through Redis
    warm_up   one short completion to each endpoint nobody has measured, before `/healthz` says ready

The board is read on the hot path (in memory, no Redis); the other three are background tasks.
"""
