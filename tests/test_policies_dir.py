"""Named policies are found without help: `policies/` beside the catalogue, else the built-in set that
ships inside the package; only a directory given explicitly may be missing."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from gateway.policy import BUILTIN_POLICIES, load_policies, policies_dir
from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import ROOT, GatewayProcess, catalogue_for

USER = [{"role": "user", "content": "hi"}]


def test_default_is_beside_the_catalogue_else_built_in(tmp_path: Path) -> None:
    catalogue = tmp_path / "providers.yaml"
    assert policies_dir(None, catalogue) == BUILTIN_POLICIES
    (tmp_path / "policies").mkdir()
    assert policies_dir(None, catalogue) == tmp_path / "policies"
    assert policies_dir("elsewhere", catalogue) == Path("elsewhere")  # explicit: taken as given
    assert policies_dir("", catalogue) is None  # explicit "": no directory, only a default policy


def test_built_in_policies_ship_as_package_data() -> None:
    names = set(load_policies(BUILTIN_POLICIES).policies)
    assert {"default", "fastest", "cheapest", "low-latency", "eu-only", "coding-agent"} <= names
    assert (ROOT / "policies").resolve() == BUILTIN_POLICIES.resolve()  # the repo's policies/: the same files
    # every data file the package reads at run time is listed as package data (so a wheel carries it)
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["gateway"]
    package = ROOT / "gateway"
    data = {p for p in package.rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc")}
    covered = {p for g in globs for p in package.glob(g)}
    assert data and data <= covered, sorted(str(p) for p in data - covered)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


def test_policies_command_and_missing_explicit_directory(tmp_path: Path) -> None:
    listed = _cli("policies", "--config", str(tmp_path / "providers.yaml"), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "fastest" in listed.stdout and "cheapest" in listed.stdout
    missing = _cli("policies", "--dir", str(tmp_path / "nope"), cwd=tmp_path)
    assert missing.returncode == 2 and "policies directory not found" in missing.stderr


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    profile = {"ttft_ms": 10, "ttft_jitter": 0, "tokens_per_second": 2000, "output_tokens": 5}
    with SimProcess(make_sim_config({"cheap": dict(profile), "dear": dict(profile)})) as s:
        yield s


def test_serve_from_an_empty_directory_has_the_named_policies(sim: SimProcess) -> None:
    catalogue = catalogue_for(sim, {"m": [{"sim": "dear", "price": {"input": 5.0, "output": 9.0}},
                                          {"sim": "cheap", "price": {"input": 0.1, "output": 0.2}}]})
    empty = Path(tempfile.mkdtemp(prefix="ultraroute-empty-"))
    with GatewayProcess(catalogue, policies_flag=False, cwd=empty) as gw:
        client = openai.OpenAI(base_url=gw.base_url, api_key="unused", max_retries=0)
        for name, sort in (("cheapest", "price"), ("fastest", "throughput"), ("low-latency", "latency")):
            raw = client.chat.completions.with_raw_response.create(
                model="m", messages=USER,
                extra_headers={"x-ultraroute-policy": name, "x-ultraroute-metadata": "enabled"})
            assert raw.http_response.status_code == 200
            # the named policy was found and applied (which endpoint serves is the router's business:
            # it explores never-measured endpoints first)
            assert raw.parse().model_extra["ultraroute"]["strategy"].startswith(f"policy={name} sort={sort}")
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model="m", messages=USER, extra_headers={"x-ultraroute-policy": "nope"})
        assert "low-latency" in str(err.value)  # the error lists the built-in set
    assert list(empty.iterdir()) == []


def test_serve_with_a_missing_explicit_directory_fails(tmp_path: Path) -> None:
    (tmp_path / "providers.yaml").write_text((ROOT / "providers.demo.yaml").read_text())
    done = _cli("serve", "--config", str(tmp_path / "providers.yaml"), "--policies", str(tmp_path / "nope"),
                "--open", cwd=tmp_path)
    assert done.returncode == 2 and "policies directory not found" in done.stderr
