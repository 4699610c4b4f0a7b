"""Client access: API keys, per-key limits and budgets, the admin API and `ultraroute keys`.

    keys.py     what a key is (stored hashed), budget periods
    store.py    where keys live: Redis, else a JSON file
    keyring.py  the running gateway's in-memory view of the store
    ledger.py   usage per key (requests, tokens, spend), shared between replicas through Redis
    gate.py     stage 0 of a request: authenticate 401, authorize 403, admit 429, charge
    manage.py   create / revoke / views, shared by the admin API and the CLI
    admin.py    the admin API routes
    command.py  `ultraroute keys ...` and the start-up check of `serve`
"""
