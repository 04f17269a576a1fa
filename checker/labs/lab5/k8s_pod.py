"""What both of lab 5's manifests need of the pod that runs torchrun, checked offline: reading a manifest,
Kubernetes' own schema (pinned), the container's command as the shell would see it, and the checks on the
pod (torchrun's --nnodes and --nproc-per-node, SIGTERM reaching the ranks, a grace period to save in, the
checkpoint on a volume, resources asked for). checker/labs/lab5/k8s.py checks each manifest's own kind
with these.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

# The Kubernetes release whose schema the manifests are checked against: the oldest one in which every
# field they use is GA (podFailurePolicy became stable in 1.31; Indexed Jobs, pod subdomains and the
# batch.kubernetes.io/* pod labels are older). A manifest valid for 1.31 is valid on any later cluster:
# GA fields of batch/v1 and v1 are not removed. Pinned, so that a verdict does not change under a
# learner when kubernetes-validate ships a newer schema.
K8S_VERSION = "1.31"
MIN_GRACE_S = 30  # Kubernetes' own default; below it a step plus a checkpoint rarely fits
TORCHRUN_SHUTDOWN_S = 30  # torchrun's --shutdown-timeout when neither it nor TORCH_ELASTIC_SHUTDOWN_TIMEOUT is set


@dataclass(frozen=True)
class Problem:
    file: str     # the manifest's file name
    where: str    # the object and field, e.g. "Job/lab5-train spec.completionMode"
    message: str  # what is wrong, why it matters, what to write

    def __str__(self) -> str:
        return f"{self.file}: {self.where}: {self.message}"


# ------------------------------------------------------------------------------------------ reading
def _load(path: Path) -> tuple[list[dict], list[Problem]]:
    if not path.exists():
        return [], [Problem(path.name, "file", f"missing: write {path}")]
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except yaml.YAMLError as e:
        return [], [Problem(path.name, "YAML", f"does not parse: {e}. Check the indentation (spaces, not tabs) "
                                               f"near the line it names")]
    bad = [i for i, d in enumerate(docs) if not isinstance(d, dict) or "kind" not in d]
    if bad:
        return [], [Problem(path.name, f"document {bad[0] + 1}", "is not a Kubernetes object (no `kind:`)")]
    return docs, []


def _name(obj: dict) -> str:
    return f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name', '?')}"


def _get(obj, *keys, default=None):
    for k in keys:
        if not isinstance(obj, dict) or k not in obj:
            return default
        obj = obj[k]
    return obj


# ---------------------------------------------------------------------------- the pinned core schema
def _schema_problems(file: str, obj: dict, where: str | None = None) -> list[Problem]:
    """kubernetes-validate, strict, against K8S_VERSION. It stops at the first error of each object."""
    try:
        import kubernetes_validate as kv
    except ImportError:
        return [Problem(file, _name(obj), "cannot check the schema: kubernetes-validate is not installed; "
                                          "run `pip install -e .` in the course's environment")]
    missing = [k for k in ("apiVersion", "kind") if not isinstance(obj.get(k), str)]
    if missing:  # kubernetes-validate would raise KeyError: say what the API server would say
        return [Problem(file, _name(obj), f"no {' and no '.join(missing)}: every object names its apiVersion "
                                          "(Job: batch/v1, Service: v1) and its kind")]
    try:
        kv.validate(obj, K8S_VERSION, strict=True)
    except kv.ValidationError as e:
        path = ".".join(str(p) for p in e.path)
        if e.validator == "additionalProperties":
            msg = (f"{e.message}: Kubernetes {K8S_VERSION} has no such field here (a typo, or a key at the wrong "
                   f"indentation); the API server would refuse the manifest")
        else:
            msg = f"{e.message} (Kubernetes {K8S_VERSION} schema)"
        return [Problem(file, f"{where}.{path}" if where else f"{_name(obj)} {path}".strip(), msg)]
    except kv.SchemaNotFoundError as e:
        return [Problem(file, _name(obj), f"{e.message}: is apiVersion right (Job: batch/v1, Service: v1)?")]
    return []


# ------------------------------------------------------------------------- the container's command
_LAUNCHER = re.compile(r"\btorchrun\b|\btorch\.distributed\.run\b")
_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_]\w*)=(\"[^\"]*\"|'[^']*'|\S*)", re.M)


def _script(container: dict, job_name: str = "") -> str:
    """command + args as one text, comments dropped, shell and env variables with known values filled in
    (`x=...` lines of the script, env entries with a `value` or the job-name label of the pod)."""
    text = "\n".join(str(a) for a in (container.get("command") or []) + (container.get("args") or []))
    text = "\n".join(re.sub(r"(^|\s)#\s.*$", "", ln) for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    known = {e["name"]: str(e["value"]) for e in container.get("env") or [] if "value" in e}
    label = re.compile(r"metadata\.labels\['(?:[\w.]+/)?job-name'\]")  # job-name, batch.kubernetes.io/job-name, ...
    known.update((e["name"], job_name) for e in container.get("env") or []
                 if label.fullmatch(str(_get(e, "valueFrom", "fieldRef", "fieldPath"))))
    known.update((k, v.strip("\"'")) for k, v in _ASSIGN.findall(text))
    for _ in range(3):  # a variable's value may name another one
        text = re.sub(r"\$(?:\((\w+)\)|\{(\w+)\}|(\w+))",
                      lambda m: known.get(m[1] or m[2] or m[3], m[0]), text)
    return text


def _opt(script: str, *names: str) -> str | None:
    """The value of the first --name=value / --name value in the script (either spelling, - or _)."""
    alts = "|".join(re.escape(n).replace("\\-", "[-_]") for n in names)
    m = re.search(rf"(?:^|\s)--(?:{alts})(?:=|\s+)(['\"]?)([^\s'\"\\;]+)\1", script)
    return m[2] if m else None


def _launcher(file: str, where: str, containers: list[dict], job_name: str):
    """(the container running torchrun, its script, []) or (None, "", [the problem])."""
    for c in containers:
        text = _script(c, job_name)
        if _LAUNCHER.search(text):
            return c, text, []
    return None, "", [Problem(file, where, "no container runs torchrun (`python -m torch.distributed.run ...` or "
                                           "`torchrun ...`): the pods would start, but train nothing")]


def _is(value) -> str:
    return "not set" if value is None else f"is {value}"


def _host(addr: str) -> str:
    return addr.rsplit(":", 1)[0] if addr.count(":") == 1 else addr


def _names(host: str, expected: str) -> bool:
    """`expected`, alone or followed by the namespace part of the name (.default.svc.cluster.local)."""
    return host == expected or host.startswith(expected + ".")


def _common_pod_checks(file: str, where: str, pod: dict, container: dict, script: str, nodes) -> list[Problem]:
    """What both manifests need of the pod running torchrun."""
    out = []
    nnodes = _opt(script, "nnodes")
    if nnodes is None:
        out.append(Problem(file, f"{where} torchrun", f"the torchrun command has no --nnodes: write --nnodes="
                                                      f"{nodes or '<number of pods>'} (one torchrun per pod), as "
                                                      f"train.sbatch passes --nnodes=$SLURM_NNODES"))
    elif nodes is not None and nnodes != str(nodes):
        out.append(Problem(file, f"{where} torchrun --nnodes",
                           f"is {nnodes}, but {nodes} pods run torchrun: the rendezvous waits for --nnodes agents, "
                           f"so it would wait for pods that never come (or refuse extra ones) until its timeout; "
                           f"make them equal"))
    if _opt(script, "nproc-per-node") is None:
        out.append(Problem(file, f"{where} torchrun", "no --nproc-per-node: torchrun would start 1 rank per pod; "
                                                      "give one per CPU asked for (one per GPU on GPU nodes)"))
    grace = pod.get("terminationGracePeriodSeconds")
    why = ("when a pod is preempted, evicted or deleted, Kubernetes sends SIGTERM, waits this long, then SIGKILLs: "
           "the ranks need it to reach a step boundary and write the checkpoint (train.sbatch: --signal=B:USR1@90)")
    if grace is None:
        out.append(Problem(file, f"{where} terminationGracePeriodSeconds",
                           f"not set: {why}. Set it explicitly, at least {MIN_GRACE_S} s (e.g. 90)"))
    elif isinstance(grace, int) and grace < MIN_GRACE_S:
        out.append(Problem(file, f"{where} terminationGracePeriodSeconds",
                           f"is {grace} s, under {MIN_GRACE_S} s: {why}. A step plus a save rarely fits; try 90"))
    elif isinstance(grace, int) and grace <= (shutdown := _shutdown_timeout(container, script)):
        out.append(Problem(file, f"{where} terminationGracePeriodSeconds",
                           f"is {grace} s, but torchrun gives its ranks {shutdown} s after passing SIGTERM on "
                           f"(--shutdown-timeout, default {TORCHRUN_SHUTDOWN_S}) before it SIGKILLs them: the pod "
                           f"is SIGKILLed first, and a save that needs the time torchrun allows is cut off. Make "
                           f"the grace period longer than that (e.g. {shutdown + 10})"))
    shell = re.match(r"\s*(?:/bin/|/usr/bin/)?(?:ba|da|z)?sh\b", str((container.get("command") or [""])[0]))
    if shell and not re.search(r"\btrap\b[^\n]*\b(?:SIG)?TERM\b", script) and \
            not re.search(r"\bexec\s+(?:\S*python\S*|torchrun)\b", script):
        out.append(Problem(file, f"{where} command",
                           "a shell is the container's main process (PID 1), and PID 1 ignores a SIGTERM it has no "
                           "handler for: torchrun and the ranks would never hear it and be SIGKILLed without a "
                           "checkpoint. `trap '... kill -TERM $pid' TERM` around a background torchrun (as "
                           "train.sbatch traps USR1), or `exec` it"))
    out += _checkpoint_on_a_volume(file, where, pod, container, script)
    res = container.get("resources") or {}
    asked = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    missing = [r for r in ("cpu", "memory") if r not in asked]
    if missing:
        out.append(Problem(file, f"{where} resources",
                           f"no {' or '.join(missing)} request: the scheduler would place "
                           f"the pod on any node, room or not, and torchrun starts its ranks "
                           f"anyway (train.sbatch: --cpus-per-task, --mem)"))
    return out


def _shutdown_timeout(container: dict, script: str) -> int:
    """Seconds torchrun waits, after passing a SIGTERM on to its ranks, before it SIGKILLs them: its
    --shutdown-timeout, else the container's TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else torchrun's default."""
    env = {e.get("name"): str(e.get("value")) for e in container.get("env") or [] if "value" in e}
    value = _opt(script, "shutdown-timeout") or env.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "")
    return int(value) if value.isdigit() else TORCHRUN_SHUTDOWN_S


def _checkpoint_on_a_volume(file, where, pod, container, script) -> list[Problem]:
    out_dir = _opt(script, "out")
    claims = {v.get("name") for v in pod.get("volumes") or [] if "persistentVolumeClaim" in v}
    mounts = [m["mountPath"].rstrip("/") for m in container.get("volumeMounts") or []
              if m.get("name") in claims and m.get("mountPath")]
    if out_dir and any(out_dir == m or out_dir.startswith(m + "/") for m in mounts):
        return []
    said = f"--out {out_dir} is not" if out_dir else "no --out: the training writes"
    return [Problem(file, f"{where} volumes",
                    f"{said} on a PersistentVolumeClaim volume. A replacement pod starts from the image, empty: "
                    f"the checkpoint and log.jsonl must outlive the pod, and every pod writes there (each rank saves "
                    f"its RNG state). Mount a ReadWriteMany PVC and point --out into it (train.sbatch: a shared "
                    f"file system)")]
