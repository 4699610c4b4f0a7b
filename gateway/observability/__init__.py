"""What the gateway tells its operators: metrics, the access log, the JSON views and terminal reports.

    metrics         the Prometheus families of one process (`GET /metrics`) and the calls that record them
    loop_metrics    lock-free counters and histograms for the per-request families
    accesslog       one JSON line per request on the logger `ultraroute.access`, never a prompt or a key
    endpoint_view   the public JSON views of an endpoint (`GET /v1/endpoints`, its history)
    report          terminal tables for `ultraroute check`, `policies` and `stats`

The live page itself is `gateway/dashboard/` (package data), which reads the endpoint views.
"""
