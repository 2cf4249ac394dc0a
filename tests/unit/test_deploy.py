"""The shipped deployment files: the Containerfile, compose.yaml and the Kubernetes
overlays (rendered with ``kubectl kustomize`` and validated against the Kubernetes schemas
offline), checked against what Signoff really reads: its settings, its port, its probes
and its drain (one source of truth)."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from dockerfile_parse import DockerfileParser

from signoff import probe
from signoff.api.app import create_app
from signoff.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = sorted(p.name for p in (ROOT / "deploy/kubernetes/overlays").iterdir())
SETTINGS = {"SIGNOFF_" + name.upper() for name in Settings.model_fields}
#: The OpenTelemetry SDK's own variables (the specification's names) the files may set.
OTEL_VARIABLES = {
    "OTEL_SERVICE_NAME",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_BSP_EXPORT_TIMEOUT",
}
KNOWN = SETTINGS | OTEL_VARIABLES | {probe.KEY_VARIABLE}
DEFAULT_PORT = Settings.model_fields["port"].default
SHUTDOWN_WAIT = Settings.model_fields["shutdown_wait_seconds"].default


def app_paths() -> set[str]:
    return set(create_app(Settings()).openapi()["paths"])


def render(overlay: str) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed to render the overlays (.ci/run installs it)"
    rendered = subprocess.run(
        [kubectl, "kustomize", str(ROOT / "deploy/kubernetes/overlays" / overlay)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def of_kind(documents: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in documents if doc["kind"] == kind]


def config_map(documents: list[dict[str, Any]]) -> dict[str, str]:
    (only,) = of_kind(documents, "ConfigMap")
    return dict(only["data"])


# --- The Containerfile ----------------------------------------------------------------


def containerfile() -> DockerfileParser:
    parsed = DockerfileParser(fileobj=io.BytesIO((ROOT / "Containerfile").read_bytes()))
    return parsed


def final_stage(parsed: DockerfileParser) -> list[dict[str, Any]]:
    instructions = parsed.structure
    last_from = max(i for i, ins in enumerate(instructions) if ins["instruction"] == "FROM")
    return instructions[last_from:]


def test_the_image_is_multi_stage_on_a_slim_python_base_the_builder_may_replace() -> None:
    parsed = containerfile()
    assert parsed.is_multistage
    froms = [ins["value"] for ins in parsed.structure if ins["instruction"] == "FROM"]
    assert froms[0] == "${BASE} AS build"
    assert froms[-1] == "${BASE}"
    arg = next(ins["value"] for ins in parsed.structure if ins["instruction"] == "ARG")
    name, _, base = arg.partition("=")  # the first instruction, read by both FROM lines
    assert name == "BASE"
    assert base.startswith("docker.io/library/python:3.")
    assert base.endswith("-slim")
    # The runtime stage takes the built environment only: no compiler, no package manager.
    runtime = " ".join(ins["value"] for ins in final_stage(parsed))
    assert "COPY" in {ins["instruction"] for ins in final_stage(parsed)}
    for tool in ("apt-get", "gcc", "build-essential", "pip install"):
        assert tool not in runtime


def test_the_image_runs_serve_as_a_non_root_user_with_a_health_check() -> None:
    parsed = containerfile()
    stage = final_stage(parsed)
    users = [ins["value"] for ins in stage if ins["instruction"] == "USER"]
    assert users, "the runtime stage must set USER"
    user = users[-1].split(":")[0]
    assert user not in ("0", "root")
    assert user.isdigit()
    assert json.loads(next(i["value"] for i in stage if i["instruction"] == "ENTRYPOINT")) == [
        "signoff"
    ]
    assert json.loads(next(i["value"] for i in stage if i["instruction"] == "CMD")) == ["serve"]
    health = next(i["value"] for i in stage if i["instruction"] == "HEALTHCHECK")
    assert "signoff.probe" in health
    assert "/healthz" in health
    assert "/healthz" in app_paths()
    # Listening on every interface of the container, on the port it exposes.
    env = parsed.envs
    assert env["SIGNOFF_HOST"] == "0.0.0.0"
    exposed = next(i["value"] for i in stage if i["instruction"] == "EXPOSE")
    assert exposed == env["SIGNOFF_PORT"] == str(DEFAULT_PORT)
    assert {name for name in env if name.startswith("SIGNOFF_")} <= SETTINGS
    labels = parsed.labels
    for label in ("title", "source", "version", "revision", "licenses"):
        assert f"org.opencontainers.image.{label}" in labels


# --- Kubernetes -----------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_renders_and_is_valid_kubernetes(overlay: str) -> None:
    documents = render(overlay)
    kinds = {doc["kind"] for doc in documents}
    assert {"Deployment", "Service", "ConfigMap", "PodDisruptionBudget"} <= kinds
    for document in documents:
        # strict: an unknown or misspelt field is an error, not silently dropped.
        kubernetes_validate.validate(document, "1.30.0", strict=True)


def test_the_postgres_overlay_runs_replicas_and_a_migration_job() -> None:
    documents = render("postgres")
    (deployment,) = of_kind(documents, "Deployment")
    assert deployment["spec"]["replicas"] >= 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    (job,) = of_kind(documents, "Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["migrate"]
    for workload in (deployment, job):
        names = {e["name"] for e in workload["spec"]["template"]["spec"]["containers"][0]["env"]}
        # One database and one key for every replica (never a key file per pod).
        assert {"SIGNOFF_DATABASE_URL", "SIGNOFF_ENCRYPTION_KEYS"} <= names


def test_the_sqlite_overlay_is_one_writer_on_a_volume() -> None:
    documents = render("sqlite")
    (deployment,) = of_kind(documents, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert not of_kind(documents, "Job")
    (claim,) = of_kind(documents, "PersistentVolumeClaim")
    pod = deployment["spec"]["template"]["spec"]
    data = next(v for v in pod["volumes"] if "persistentVolumeClaim" in v)
    assert data["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    # The image's SQLite database lives in the mounted directory.
    database = containerfile().envs["SIGNOFF_DATABASE_URL"].removeprefix("sqlite:///")
    assert Path(database).parent == Path(mounts[data["name"]])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_manifests_match_the_settings_signoff_reads(overlay: str) -> None:
    documents = render(overlay)
    settings = config_map(documents)
    assert set(settings) <= KNOWN, set(settings) - KNOWN
    port = int(settings.get("SIGNOFF_PORT", DEFAULT_PORT))
    paths = app_paths()
    shutdown_wait = float(settings.get("SIGNOFF_SHUTDOWN_WAIT_SECONDS", SHUTDOWN_WAIT))
    (service,) = of_kind(documents, "Service")
    for workload in of_kind(documents, "Deployment") + of_kind(documents, "Job"):
        pod = workload["spec"]["template"]["spec"]
        for container in pod["containers"]:
            names = {e["name"] for e in container.get("env", [])}
            assert names <= KNOWN, names - KNOWN
            for source in container.get("envFrom", []):
                assert (
                    source["configMapRef"]["name"]
                    == of_kind(documents, "ConfigMap")[0]["metadata"]["name"]
                )
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["readOnlyRootFilesystem"] is True
            assert context["capabilities"]["drop"] == ["ALL"]
            assert "requests" in container["resources"]
            # A read-only root: every writable path the process uses is a volume.
            mounts = {m["mountPath"] for m in container["volumeMounts"]}
            assert "/tmp" in mounts
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    (deployment,) = of_kind(documents, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert "SIGNOFF_PROBE_API_KEY" in {e["name"] for e in container["env"]}
    assert {"/readyz", "/healthz"} <= paths
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["http"] == port
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["livenessProbe"]["httpGet"]["port"] in ("http", port)
    assert container["readinessProbe"]["exec"]["command"][-2:] == ["signoff.probe", "/readyz"]
    assert service["spec"]["ports"][0]["targetPort"] in ("http", port)
    # SIGTERM drains for SIGNOFF_SHUTDOWN_WAIT_SECONDS after the preStop pause: the
    # kubelet must not kill the pod before that.
    pause = float(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert pod["terminationGracePeriodSeconds"] > pause + shutdown_wait


# --- compose.yaml ---------------------------------------------------------------------


def env_file_names(path: Path) -> set[str]:
    names = set()
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            names.add(line.split("=", 1)[0].strip())
    return names


def test_compose_runs_two_replicas_behind_one_address_after_a_migration() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    assert {"postgres", "migrate", "signoff", "proxy", "pgbouncer"} <= set(services)
    signoff = services["signoff"]
    assert signoff["deploy"]["replicas"] == 2
    assert "ports" not in signoff  # only the proxy publishes an address
    assert services["proxy"]["ports"]
    assert services["migrate"]["command"] == ["migrate"]
    assert signoff["command"] == ["serve"]
    assert signoff["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["pgbouncer"]["profiles"] == ["pgbouncer"]
    assert signoff["read_only"] is True
    assert signoff["cap_drop"] == ["ALL"]
    # Its grace period covers the drain.
    grace = float(signoff["stop_grace_period"].removesuffix("s"))
    assert grace > float(signoff["environment"]["SIGNOFF_SHUTDOWN_WAIT_SECONDS"])
    # The proxy reaches the replicas on the port Signoff listens on.
    port = signoff["environment"]["SIGNOFF_PORT"]
    assert signoff["expose"] == [port]
    assert f"server signoff:{port}" in (ROOT / "deploy/compose/nginx.conf").read_text()


def test_compose_and_its_env_files_name_only_settings_signoff_reads() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    for name in ("migrate", "signoff"):
        service = compose["services"][name]
        assert set(service.get("environment", {})) <= KNOWN
        for entry in service["env_file"]:
            # Secrets come from env files that are not committed; their examples are.
            example = ROOT / (entry["path"] + ".example")
            assert example.exists(), example
            names = env_file_names(example)
            assert names
            assert names <= KNOWN, names - KNOWN
