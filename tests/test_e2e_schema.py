"""schemathesis against the gateway's own OpenAPI document: EVERY route of `/openapi.json` (the `/admin`
routes with the admin key, all others with a client key), every check on, all phases, in front of the
simulator. A route the run did not test fails the test: a new route cannot slip out of it.

It must find no 5xx and no response that breaks the schema (status, content type, body, headers),
and no request the schema forbids that the gateway accepts. Lone UTF-16 surrogates in JSON strings
are left out of generation (`--generation-codec`): they are valid JSON syntax but not text, so the
gateway refuses them with a 400 as OpenAI does, which no JSON Schema can express.

The schema lists OpenAI's message roles; the gateway holds to it: a message with another role is a
400 naming `messages[i].role` that never reaches the provider (the simulator counts requests).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree

import httpx
import openai
import pytest

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import ROOT, GatewayProcess, catalogue_for

ADMIN_KEY = "admin-" + "s" * 30
# accepts_prefix: a conversation may end with an assistant message (the schema allows any role order).
# pytest-timeout bounds the item with its fixtures: on two cores the other xdist worker shares, the
# gateway's start and the run took 31 s + 89 s, and pyproject's 120 s cut it off.
pytestmark = pytest.mark.timeout(300)
PROFILE = {"ttft_ms": 2, "ttft_jitter": 0, "tokens_per_second": 5000, "output_tokens": 4, "accepts_prefix": True}


def schemathesis(gw: GatewayProcess, key: str, path_regex: str, report: Path) -> subprocess.CompletedProcess[str]:
    st = Path(sys.executable).with_name("st")
    cmd = [str(st), "--config-file", str(ROOT / "tests" / "schemathesis.toml"),
           "run", f"{gw.url}/openapi.json", "--include-path-regex", path_regex,
           "--header", f"Authorization: Bearer {key}", "--checks", "all",
           # ST_EXAMPLES / ST_SEED: a longer or different run by hand; CI runs the fixed one.
           "--max-examples", os.environ.get("ST_EXAMPLES", "40"), "--seed", os.environ.get("ST_SEED", "7"),
           # One worker: hypothesis describes strategies with ast.parse, which CPython 3.11 cannot run in two
           # threads at once ("SystemError: AST constructor recursion depth mismatch").
           "--generation-codec", "utf-8", "--no-color", "--workers", "1",
           "--request-timeout", "20", "--report", "junit", "--report-dir", str(report)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def _tested(report: Path) -> set[str]:
    """The operations a run tested, from its JUnit report (`GET /v1/models`, ...)."""
    names: set[str] = set()
    for xml in report.glob("*.xml"):
        names |= {case.get("name", "") for case in ElementTree.parse(xml).iter("testcase")}
    return names


@pytest.fixture(scope="module")
def setup() -> Iterator[tuple[SimProcess, GatewayProcess, str]]:
    with SimProcess(make_sim_config({"a": dict(PROFILE)})) as sim:
        # A small max_output_tokens: larger max_tokens are refused by the router, not generated.
        cat = catalogue_for(sim, {"m": [{"sim": "a", "max_output_tokens": 64,
                                         "capabilities": ["assistant_prefix"]}]}, gateway={"max_body_bytes": 65536})
        gw = GatewayProcess(cat, env={"ULTRAROUTE_ADMIN_KEY": ADMIN_KEY}, open_access=False)
        client_key = gw.create_key()
        with gw:
            yield sim, gw, client_key


def test_every_route_conforms_to_the_schema(setup: tuple[SimProcess, GatewayProcess, str], tmp_path: Path) -> None:
    _, gw, client_key = setup
    document = httpx.get(f"{gw.url}/openapi.json", timeout=30).json()
    client = schemathesis(gw, client_key, "^/(?!admin/)", tmp_path / "client")
    admin = schemathesis(gw, ADMIN_KEY, "^/admin/", tmp_path / "admin")
    for run in (client, admin):
        assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
        assert "No issues found" in run.stdout or " passed" in run.stdout, run.stdout[-3000:]
    documented = {f"{method.upper()} {path}" for path, item in document["paths"].items() for method in item}
    assert len(documented) >= 15 and {"GET /v1/endpoints/history", "POST /admin/reload"} <= documented
    assert documented <= _tested(tmp_path / "client") | _tested(tmp_path / "admin")
    logs = gw.logs()
    assert "Traceback" not in logs, logs[-4000:]


def test_an_unknown_role_is_a_400_that_never_reaches_a_provider(setup: tuple[SimProcess, GatewayProcess, str]) -> None:
    sim, gw, _ = setup
    # A key of its own: the schemathesis run's stateful phase revokes the keys it finds.
    created = httpx.post(f"{gw.url}/admin/keys", json={"name": "roles"}, timeout=30,
                         headers={"authorization": f"Bearer {ADMIN_KEY}"})
    assert created.status_code == 201, created.text
    client = openai.OpenAI(base_url=gw.base_url, api_key=created.json()["key"], max_retries=0)
    before = sim.stats("a")["requests"]
    assert client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}]).choices
    for role in ("robot", "User", "human"):
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"},
                                                                {"role": role, "content": "hi"}])
        error = refused.value.body
        assert isinstance(error, dict) and error["param"] == "messages[1].role", error
        assert "system, developer, user, assistant, tool, function" in error["message"], error
    assert sim.stats("a")["requests"] == before + 1  # only the valid request reached the provider
