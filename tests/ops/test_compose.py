"""docker-compose.yml, the Dockerfile and deploy/ checked against the code (there is no Docker
engine here): every command runs something that exists, ports match the settings, depends_on
names real services with a way to satisfy the condition, the migration runs before the API
and the workers, and every environment variable is a setting."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from service.core.config import Settings

REPO = Path(__file__).resolve().parents[2]
APP_SERVICES = ("migrate", "api", "worker", "verifier", "scheduler")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def _has_healthcheck(service: dict) -> bool:
    hc = service.get("healthcheck")
    if hc is not None:
        return not hc.get("disable", False) and bool(hc.get("test"))
    # no compose healthcheck: the image's (our Dockerfile has one)
    return service.get("build") is not None and "HEALTHCHECK" in (REPO / "Dockerfile").read_text()


def test_the_stack_has_every_design_service(services):
    assert set(services) == {
        "postgres",
        "redis",
        "migrate",
        "api",
        "worker",
        "verifier",
        "scheduler",
        "prometheus",
        "grafana",
    }
    for name in APP_SERVICES:
        assert services[name]["build"] == "." and services[name]["image"] == "tasmopt:latest"


def test_commands_name_things_that_exist(services):
    from click.testing import CliRunner

    from tasmopt.cli import main

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    for name in APP_SERVICES:
        cmd = services[name]["command"]
        assert isinstance(cmd, list), f"{name}: use the exec form"
        if cmd[0] == "uvicorn":
            module, _, attr = cmd[1].partition(":")
            assert callable(getattr(importlib.import_module(module), attr))
            assert "--factory" in cmd
        elif cmd[0] == "alembic":
            assert cmd[1:] == ["upgrade", "head"]
            assert (REPO / "alembic.ini").is_file() and (REPO / "migrations" / "env.py").is_file()
        else:
            assert cmd[0] in scripts, f"{name}: {cmd[0]} is not a console script"
            assert cmd[1] in main.commands, f"{name}: no `tasmopt {cmd[1]}`"
            result = CliRunner().invoke(main, [*cmd[1:], "--help"])
            assert result.exit_code == 0, result.output  # every option it passes exists


def test_ports_match_the_settings_and_the_scrape_config(services):
    import inspect

    from tasmopt.cli import serve

    defaults = Settings()
    api_cmd = services["api"]["command"]
    api_port = int(api_cmd[api_cmd.index("--port") + 1])
    serve_port = next(p.default for p in serve.params if p.name == "port")
    assert api_port == serve_port == 8000
    assert services["api"]["ports"] == [f"{api_port}:{api_port}"]
    worker_cmd = services["worker"]["command"]
    worker_port = int(worker_cmd[worker_cmd.index("--metrics-port") + 1])
    assert worker_port == defaults.worker_metrics_port
    assert "ports" not in services["worker"]  # replicas cannot share a host port
    assert "container_name" not in services["worker"]
    env = services["worker"]["environment"]
    assert int(env["WORKER_METRICS_PORT"]) == worker_port

    prom = yaml.safe_load((REPO / "deploy" / "prometheus.yml").read_text())
    targets = {
        c["job_name"]: c["dns_sd_configs"][0]
        for c in prom["scrape_configs"]
        if "dns_sd_configs" in c
    }
    assert targets["tasmopt-api"]["names"] == ["api"]
    assert targets["tasmopt-api"]["port"] == api_port
    assert targets["tasmopt-worker"]["names"] == ["worker", "verifier"]
    verifier_cmd = services["verifier"]["command"]
    assert verifier_cmd[verifier_cmd.index("--queues") + 1] == "verify"  # nothing but checks
    assert int(verifier_cmd[verifier_cmd.index("--metrics-port") + 1]) == worker_port
    assert targets["tasmopt-worker"]["port"] == worker_port
    for c in prom["scrape_configs"]:
        assert c.get("metrics_path", "/metrics") == "/metrics"
    assert "9090:9090" in services["prometheus"]["ports"]
    assert "3000:3000" in services["grafana"]["ports"]
    assert inspect.signature(Settings)  # settings import cleanly without environment


def test_dependencies_and_migration_order(services):
    for name, service in services.items():
        for target, spec in (service.get("depends_on") or {}).items():
            assert target in services, f"{name} depends on unknown {target}"
            condition = spec["condition"]
            if condition == "service_healthy":
                assert _has_healthcheck(services[target]), f"{target} has no healthcheck"
            elif condition == "service_completed_successfully":
                assert services[target].get("restart") == "no", f"{target} must be one-shot"
            else:
                assert condition == "service_started"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("api", "worker", "scheduler"):
        dep = services[name]["depends_on"]
        assert dep["migrate"]["condition"] == "service_completed_successfully", name
        assert dep["redis"]["condition"] == "service_healthy", name
    assert services["api"]["environment"]["MIGRATE_ON_START"] == "false"
    assert services["prometheus"]["depends_on"]["api"]["condition"] == "service_healthy"
    assert services["grafana"]["depends_on"]["prometheus"]["condition"] == "service_healthy"


def test_workers_scale_and_every_service_is_checked(services):
    assert services["worker"]["deploy"]["replicas"] >= 2
    for name in ("postgres", "redis", "api", "worker", "scheduler", "prometheus", "grafana"):
        assert _has_healthcheck(services[name]), name


def test_environment_is_settings(services):
    fields = {name.upper() for name in Settings.model_fields}
    for name in APP_SERVICES:
        env = services[name]["environment"]
        unknown = set(env) - fields
        assert not unknown, f"{name}: {unknown} are not settings"
        assert env["DATABASE_URL"].startswith("postgresql://")
        assert env["DATABASE_URL"].split("@")[1].startswith("postgres:5432/")
        assert env["REDIS_URL"] == "redis://redis:6379/0"
        assert "ADMIN_TOKEN" in env  # the API refuses to start outside the embedded mode
        kwargs = {k.lower(): v for k, v in env.items() if "${" not in v}
        Settings(**kwargs)  # the values validate


def test_volumes_and_mounts_exist(compose, services):
    declared = set(compose["volumes"])
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (REPO / source).exists(), f"{name}: {source} missing"
            else:
                assert source in declared, f"{name}: volume {source} not declared"
    spool = services["api"]["environment"]["SPOOL_DIR"]
    for name in ("api", "worker"):
        assert f"spool:{spool}" in services[name]["volumes"]  # the API drains the workers' rows


def test_dockerfile(services):
    text = (REPO / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim\b", text, re.M)
    pins = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    torch = next(p for p in pins if p.startswith("torch=="))
    assert f"--index-url https://download.pytorch.org/whl/cpu {torch}" in text
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user and user[-1] not in ("root", "0")
    assert re.search(r"^HEALTHCHECK .*\n?.*/healthz", text, re.M)
    cmd = re.search(r"^CMD (\[.*\])", text, re.M).group(1)
    assert yaml.safe_load(cmd) == services["api"]["command"]
    ignored = (REPO / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


def test_grafana_provisioning_points_at_the_dashboards(services):
    prov = REPO / "deploy" / "grafana" / "provisioning"
    ds = yaml.safe_load((prov / "datasources" / "prometheus.yml").read_text())["datasources"][0]
    assert ds["type"] == "prometheus" and ds["url"] == "http://prometheus:9090"
    provider = yaml.safe_load((prov / "dashboards" / "tasmopt.yml").read_text())["providers"][0]
    mounts = dict(v.split(":")[:2] for v in services["grafana"]["volumes"])
    assert mounts["./deploy/grafana/dashboards"] == provider["options"]["path"]
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
