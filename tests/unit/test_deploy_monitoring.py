"""The monitoring files in deploy/ stay true to the gateway: the Prometheus scrape configs parse and
scrape /metrics of the right instances, and every metric (and grouping label) the Grafana dashboard
queries is one that `adk_gateway.metrics.Metrics` exposes, so renaming a metric or a label breaks this
test instead of leaving an empty panel."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from adk_gateway.metrics import Metrics

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PROMETHEUS = DEPLOY / "prometheus"
DASHBOARD = DEPLOY / "grafana" / "adk-gateway.json"

METRIC = re.compile(r"\badk_gateway_[a-z0-9_]+")
BY = re.compile(r"\bby\s*\(([^)]*)\)")
LEGEND_LABEL = re.compile(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}")
# Labels Prometheus adds to every scraped series, and the histogram's bucket bound.
TARGET_LABELS = {"instance", "job"}
SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum", "_created")}


def exposed() -> dict[str, set[str]]:
    """Every sample name the registry can expose (`_total`, `_bucket`, ... included), with the
    label names of its metric. A labelled metric has no sample until a child is made, so names
    come from each family's type; label names from the metric objects themselves."""
    metrics = Metrics()
    labels = {}
    for metric in vars(metrics).values():
        if isinstance(metric, MetricWrapperBase):
            for family in metric.describe():
                # prometheus_client keeps a metric's label names here; no public accessor exists.
                labels[family.name] = set(metric._labelnames)
    names: dict[str, set[str]] = {}
    for family in metrics.registry.collect():
        for suffix in SUFFIXES[family.type]:
            extra = {"le"} if suffix == "_bucket" else set()
            names[family.name + suffix] = labels[family.name] | extra
        for sample in family.samples:
            names.setdefault(sample.name, set(sample.labels))
    return names


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row holds its panels


def queries(board: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(panel title, target) for every query of every panel."""
    for panel in panels(board):
        for target in panel.get("targets", []):
            yield panel["title"], target


def scrape_configs(name: str) -> list[dict[str, Any]]:
    config = yaml.safe_load((PROMETHEUS / name).read_text(encoding="utf-8"))
    assert isinstance(config, dict), name
    jobs = config["scrape_configs"]
    assert jobs, name
    return list(jobs)


def targets(jobs: list[dict[str, Any]]) -> set[str]:
    return {t for job in jobs for static in job["static_configs"] for t in static["targets"]}


def test_the_registry_names_are_read_as_exposed() -> None:
    names = exposed()
    assert "adk_gateway_requests_total" in names
    assert names["adk_gateway_requests_total"] == {"transport"}
    assert {"adk_gateway_run_seconds_bucket", "adk_gateway_run_seconds_count", "adk_gateway_run_seconds_sum"} <= set(
        names
    )
    assert "le" in names["adk_gateway_run_seconds_bucket"]
    assert "adk_gateway_active_runs" in names
    assert "adk_gateway_requests" not in names  # the counter's bare name is not a series


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("prometheus.yml", {"127.0.0.1:8089", "127.0.0.1:8090"}),
        ("prometheus-compose.yml", {"gateway-1:8080", "gateway-2:8080"}),
    ],
)
def test_the_scrape_configs_parse_and_scrape_metrics_of_each_gateway(name: str, expected: set[str]) -> None:
    text = (PROMETHEUS / name).read_text(encoding="utf-8")
    assert "/metrics" in text
    jobs = scrape_configs(name)
    for job in jobs:
        assert job["metrics_path"] == "/metrics"
        assert job["job_name"]
    assert targets(jobs) == expected
    # Each gateway is scraped on its own port, never through nginx (8088 locally, 8080 on the host).
    assert not {"127.0.0.1:8088", "nginx:80"} & targets(jobs)


def test_the_scrape_targets_match_the_cluster_and_compose_defaults() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))
    for service in ("gateway-1", "gateway-2"):
        assert service in compose["services"]
        assert compose["services"][service]["environment"]["ADK_GATEWAY_PORT"] == "8080"
    spec = importlib.util.spec_from_file_location("deploy_cluster", DEPLOY / "cluster.py")
    assert spec is not None and spec.loader is not None
    cluster = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = cluster  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(cluster)
        config = cluster.load_config({})
    finally:
        del sys.modules[spec.name]
    assert targets(scrape_configs("prometheus.yml")) == {f"{cluster.HOST}:{p}" for p in config.gateway_ports}
    # The nginx site's upstream (a host with one gateway per port) is offered, commented out.
    upstream = re.findall(r"^\s*server (127\.0\.0\.1:\d+)", (DEPLOY / "nginx" / "adk-gateway.conf").read_text(
        encoding="utf-8"), re.MULTILINE)
    text = (PROMETHEUS / "prometheus.yml").read_text(encoding="utf-8")
    assert upstream
    for address in upstream:
        assert re.search(rf"^\s*#\s+- {re.escape(address)}$", text, re.MULTILINE), address


def test_the_scrape_config_warns_that_metrics_is_public() -> None:
    text = (PROMETHEUS / "prometheus.yml").read_text(encoding="utf-8")
    assert "unauthenticated" in text
    assert "location = /metrics" in text
    assert "ADK_GATEWAY_METRICS_TOKEN" in text


def test_the_dashboard_is_importable() -> None:
    board = dashboard()
    assert 36 <= board["schemaVersion"] <= 41
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["DS_PROMETHEUS"]["query"] == "prometheus"
    assert variables["instance"]["type"] == "query"
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids))
    for panel in panels(board):
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, panel["title"]
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]


def test_every_metric_the_dashboard_queries_exists() -> None:
    names = exposed()
    board = dashboard()
    used: set[str] = set()
    for title, target in queries(board):
        found = set(METRIC.findall(target["expr"]))
        assert found, f"{title}: {target['expr']}"
        used |= found
    # The instance variable's query too.
    used |= set(METRIC.findall(json.dumps(board["templating"])))
    missing = sorted(used - set(names))
    assert not missing, f"the dashboard queries metrics the gateway does not expose: {missing}"


def test_every_grouping_label_exists_on_its_metrics() -> None:
    names = exposed()
    for title, target in queries(dashboard()):
        expr = target["expr"]
        allowed = TARGET_LABELS.union(*(names.get(m, set()) for m in METRIC.findall(expr)))
        grouped = {label.strip() for group in BY.findall(expr) for label in group.split(",") if label.strip()}
        assert grouped <= allowed, f"{title}: {expr} groups by {sorted(grouped - allowed)}"
        shown = set(LEGEND_LABEL.findall(target.get("legendFormat", "")))
        assert shown <= (grouped or allowed), f"{title}: legend {target['legendFormat']!r}"


def test_every_query_follows_the_instance_variable() -> None:
    for title, target in queries(dashboard()):
        expr = target["expr"]
        for metric in METRIC.findall(expr):
            assert f'{metric}{{instance=~"$instance"}}' in expr, f"{title}: {metric} ignores $instance"


def test_the_dashboard_has_the_panels_of_the_gateway_metrics() -> None:
    used = {m for _, target in queries(dashboard()) for m in METRIC.findall(target["expr"])}
    assert {
        "adk_gateway_requests_total",
        "adk_gateway_runs_started_total",
        "adk_gateway_runs_finished_total",
        "adk_gateway_run_seconds_bucket",
        "adk_gateway_active_runs",
        "adk_gateway_connections",
        "adk_gateway_approvals_issued_total",
        "adk_gateway_approvals_answered_total",
        "adk_gateway_approvals_refused_total",
        "adk_gateway_rejections_total",
        "adk_gateway_timeouts_total",
        "adk_gateway_slow_readers_cut_total",
        "adk_gateway_sessions_rebuilt_total",
        "adk_gateway_ws_frames_refused_total",
        "adk_gateway_auth_refused_total",
    } <= used
    quantiles = [t["expr"] for _, t in queries(dashboard()) if "histogram_quantile" in t["expr"]]
    assert {re.search(r"histogram_quantile\(([0-9.]+)", q).group(1) for q in quantiles} == {"0.5", "0.95", "0.99"}
