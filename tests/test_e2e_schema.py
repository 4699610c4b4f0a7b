"""schemathesis against the gateway's own OpenAPI document: the completion route (with a client key)
and the admin routes (with the admin key), every check on, in front of the simulator.

It must find no 5xx and no response that breaks the schema (status, content type, body, headers),
and no request the schema forbids that the gateway accepts. Lone UTF-16 surrogates in JSON strings
are left out of generation (`--generation-codec`): they are valid JSON syntax but not text, so the
gateway refuses them with a 400 as OpenAI does, which no JSON Schema can express.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import ROOT, GatewayProcess, catalogue_for

ADMIN_KEY = "admin-" + "s" * 30
PROFILE = {"ttft_ms": 2, "ttft_jitter": 0, "tokens_per_second": 5000, "output_tokens": 4}


def schemathesis(gw: GatewayProcess, key: str, path_regex: str, report: Path) -> subprocess.CompletedProcess[str]:
    st = Path(sys.executable).with_name("st")
    cmd = [str(st), "run", f"{gw.url}/openapi.json", "--include-path-regex", path_regex,
           "--header", f"Authorization: Bearer {key}", "--checks", "all",
           # ST_EXAMPLES / ST_SEED: a longer or different run by hand; CI runs the fixed one.
           "--max-examples", os.environ.get("ST_EXAMPLES", "40"), "--seed", os.environ.get("ST_SEED", "7"),
           "--generation-codec", "utf-8", "--no-color", "--workers", "2",
           "--request-timeout", "20", "--report", "junit", "--report-dir", str(report)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_completion_and_admin_routes_conform_to_the_schema(tmp_path: Path) -> None:
    with SimProcess(make_sim_config({"a": dict(PROFILE)})) as sim:
        # A small max_output_tokens: larger max_tokens are refused by the router, not generated.
        cat = catalogue_for(sim, {"m": [{"sim": "a", "max_output_tokens": 64}]}, gateway={"max_body_bytes": 65536})
        gw = GatewayProcess(cat, env={"ULTRAROUTE_ADMIN_KEY": ADMIN_KEY}, open_access=False)
        client_key = gw.create_key()
        with gw:
            completions = schemathesis(gw, client_key, "^/v1/chat/completions$", tmp_path / "chat")
            admin = schemathesis(gw, ADMIN_KEY, "^/admin/", tmp_path / "admin")
        logs = gw.logs()
    for run in (completions, admin):
        assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
        assert "No issues found" in run.stdout or " passed" in run.stdout, run.stdout[-3000:]
    assert "Traceback" not in logs, logs[-4000:]
