"""Running the gateway as a server: worker processes, overload control, the event loop's lag, and
the process's signals and life cycle.

    workers.py     `serve --workers N`: a supervisor that forwards SIGTERM/SIGHUP to each worker
    overload.py    admission: 503 `overloaded` past `gateway.max_in_flight`
    lag.py         the event loop's lag, measured and kept out of the providers' budgets
    respond.py     HTTP responses whose work (and upstream) stops when the client hangs up
    request_id.py  every request's id, echoed as `x-request-id`
    server.py      uvicorn with the gateway's signal handling (SIGTERM/SIGINT drain, SIGHUP reloads)
    drain.py       zero-downtime shutdown: refuse new requests, let streams finish, then exit
    reload.py      a new catalogue and policies for new requests while streams finish on the old ones
"""
