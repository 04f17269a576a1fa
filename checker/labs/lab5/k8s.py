"""Lab 5's Kubernetes manifests, checked offline: no cluster, no network.

    python -m checker.labs.lab5.k8s solutions/lab5_scheduler/k8s     # one line per problem; exit 1 if any

`validate_manifests(folder)` reads the folder's torchrun-job.yaml (an Indexed Job + a headless Service)
and pytorchjob.yaml (a Kubeflow PyTorchJob) and returns their problems; an empty list means valid.

1. The core kinds (Service, Job, and the pod templates inside the PyTorchJob) are validated against
   Kubernetes' own OpenAPI schema, as shipped by kubernetes-validate for K8S_VERSION, in strict mode:
   a field the schema does not know (a typo, or a key at the wrong indentation) is an error, as it is
   for `kubectl apply` (server-side field validation is Strict by default since 1.27).
2. What no schema says and a real cluster would only show at run time, after minutes of waiting:
   the Job runs one pod per node at once and tells each its index, the pods can find node 0 by name,
   torchrun's --nnodes is the number of pods, SIGTERM reaches the ranks and they have time to save,
   the checkpoint outlives the pod. The PyTorchJob is a custom kind (kubernetes-validate has no
   schema for it), so its fields are checked here against the training operator's own rules.

How each manifest maps to train.sbatch: solutions/lab5_scheduler/k8s/README.md.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from .k8s_pod import (
    _LAUNCHER,
    K8S_VERSION,
    Problem,
    _common_pod_checks,
    _get,
    _host,
    _is,
    _launcher,
    _load,
    _name,
    _names,
    _opt,
    _schema_problems,
    _script,
)

JOB_FILE, PYTORCHJOB_FILE = "torchrun-job.yaml", "pytorchjob.yaml"


def validate_manifests(folder) -> list[Problem]:
    """Every problem of the two manifests in `folder`; [] when both are valid."""
    folder = Path(folder)
    return _check_torchrun_job(folder / JOB_FILE) + _check_pytorchjob(folder / PYTORCHJOB_FILE)


# ------------------------------------------------------------------------------- torchrun-job.yaml
def _check_torchrun_job(path: Path) -> list[Problem]:
    docs, problems = _load(path)
    if problems:
        return problems
    f = path.name
    for d in docs:
        if d.get("kind") not in ("Job", "Service"):
            problems.append(Problem(f, _name(d), "unexpected here: this file holds a Job and its headless Service"))
        else:
            problems += _schema_problems(f, d)
    jobs = [d for d in docs if d.get("kind") == "Job"]
    services = {(d.get("metadata") or {}).get("name"): d for d in docs if d.get("kind") == "Service"}
    headless = {n: s for n, s in services.items() if _get(s, "spec", "clusterIP") == "None"}
    if len(jobs) != 1:
        return problems + [Problem(f, "Job", f"{len(jobs)} Jobs: write one batch/v1 Job, one pod per node")]
    job = jobs[0]
    name, where = (job.get("metadata") or {}).get("name", "?"), _name(job)
    spec = job.get("spec") or {}
    pod = _get(spec, "template", "spec", default={}) or {}
    labels = {**(_get(spec, "template", "metadata", "labels", default={}) or {}),
              "job-name": name, "batch.kubernetes.io/job-name": name}  # the Job controller adds these two

    mode = spec.get("completionMode")
    if mode != "Indexed":
        problems.append(Problem(f, f"{where} spec.completionMode",
                                f"{'not set' if mode is None else f'is {mode!r}'}: write `completionMode: Indexed`. "
                                f"Without it the pods are interchangeable: none gets JOB_COMPLETION_INDEX (Slurm's "
                                f"SLURM_NODEID) or the hostname {name}-<index>, so none knows it is node 0 and the "
                                f"others cannot find it"))
    completions, parallelism = spec.get("completions"), spec.get("parallelism", 1)
    if completions is None:
        problems.append(Problem(f, f"{where} spec.completions",
                                "not set: one pod per node, so completions = parallelism = the number of nodes "
                                "(train.sbatch: --nodes)"))
    elif parallelism != completions:
        problems.append(Problem(f, f"{where} spec.parallelism",
                                f"is {parallelism} but completions is {completions}: torchrun waits until all "
                                f"--nnodes agents have joined, so every node's pod must run at the same time; "
                                f"set both to the number of nodes"))
    restart = pod.get("restartPolicy")
    if restart not in ("Never", "OnFailure"):
        problems.append(Problem(f, f"{where} spec.template.spec.restartPolicy",
                                f"is {restart!r}: a Job's pods need Never (a failed pod is replaced, and "
                                f"podFailurePolicy can decide) or OnFailure (the container restarts in place)"))
    if spec.get("podFailurePolicy") and restart != "Never":
        problems.append(Problem(f, f"{where} spec.podFailurePolicy",
                                "needs restartPolicy: Never in the pod template (the API server refuses it otherwise)"))
    if "backoffLimit" not in spec and not spec.get("podFailurePolicy"):
        problems.append(Problem(f, f"{where} spec.backoffLimit",
                                "no retry policy: Kubernetes' analogue of train.sbatch's --requeue is how many failed "
                                "pods the Job replaces (backoffLimit, default 6) and which failures do not count "
                                "(podFailurePolicy: Ignore a preempted pod, condition DisruptionTarget, and the "
                                "script's checkpointed exit). Set them"))

    subdomain = pod.get("subdomain")
    if not headless:
        problems.append(Problem(f, "Service", "no headless Service (spec.clusterIP: None): without one no pod has a "
                                              "DNS name, and torchrun's --master-addr has nothing to point at"))
    elif subdomain is None:
        problems.append(Problem(f, f"{where} spec.template.spec.subdomain",
                                f"not set: set it to the headless Service's name ({', '.join(headless)}), so that "
                                f"pod i is reachable as {name}-i.{next(iter(headless))}: node 0's address for the "
                                f"rendezvous (train.sbatch: the first host of $SLURM_JOB_NODELIST)"))
    elif subdomain not in headless:
        problems.append(Problem(f, f"{where} spec.template.spec.subdomain",
                                f"is {subdomain!r}, but the headless Service is named {', '.join(headless)}: a pod's "
                                f"DNS name <hostname>.<subdomain> exists only when a headless Service of that name "
                                f"selects it; make them equal"))
    svc = headless.get(subdomain) or next(iter(headless.values()), None)
    if svc is not None:
        selector = _get(svc, "spec", "selector", default={}) or {}
        if not selector or any(labels.get(k) != v for k, v in selector.items()):
            problems.append(Problem(f, f"{_name(svc)} spec.selector",
                                    f"{selector or 'empty'} selects no pod of {where} (its pods carry {labels}): "
                                    f"the Service publishes DNS names only for the pods it selects; select "
                                    f"batch.kubernetes.io/job-name: {name}"))

    container, script, missing = _launcher(f, f"{where} spec.template.spec.containers", pod.get("containers") or [],
                                           name)
    problems += missing
    if container is None:
        return problems
    pwhere = f"{where} spec.template.spec"
    problems += _common_pod_checks(f, pwhere, pod, container, script, completions)
    expected = f"{name}-0.{subdomain or (next(iter(headless)) if headless else '<service>')}"
    backend = _opt(script, "rdzv-backend") or "static"
    if backend != "static":
        endpoint = _opt(script, "rdzv-endpoint")
        if endpoint is None or not _names(_host(endpoint), expected):
            problems.append(Problem(f, f"{pwhere} torchrun --rdzv-endpoint",
                                    f"{_is(endpoint)}: every pod's torchrun must meet at node 0's stable name, "
                                    f"--rdzv-endpoint={expected}:29400 (train.sbatch: $master_addr:$master_port)"))
    else:
        rank, master = _opt(script, "node-rank"), _opt(script, "master-addr")
        if rank is None or "JOB_COMPLETION_INDEX" not in rank:
            problems.append(Problem(f, f"{pwhere} torchrun --node-rank",
                                    f"{_is(rank)}: each pod's node rank is its index, "
                                    "--node-rank=$JOB_COMPLETION_INDEX "
                                    f"(set by the Job controller; Slurm's SLURM_NODEID). Or use c10d: "
                                    f"--rdzv-backend=c10d --rdzv-endpoint={expected}:29400"))
        if master is None or not _names(master, expected):
            problems.append(Problem(f, f"{pwhere} torchrun --master-addr",
                                    f"{_is(master)}: ranks meet at node 0, whose stable DNS name is {expected} "
                                    f"(<job>-<index>.<service>); pod IPs change with every retry"))
        if _opt(script, "master-port") is None:
            problems.append(Problem(f, f"{pwhere} torchrun --master-port",
                                    "not set: every pod must name the same port, e.g. --master-port=29500"))
    return problems


# --------------------------------------------------------------------------------- pytorchjob.yaml
# kubeflow.org/v1 PyTorchJob fields (training-operator pkg/apis/kubeflow.org/v1: pytorch_types.go,
# common_types.go) and its webhook's rules (pytorch_validation.go), by hand: no schema ships for CRDs.
_PTJ_FIELDS = {
    "spec": {"runPolicy", "elasticPolicy", "pytorchReplicaSpecs", "nprocPerNode"},
    "spec.runPolicy": {"cleanPodPolicy", "ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit",
                       "schedulingPolicy", "suspend", "managedBy"},
    "spec.elasticPolicy": {"minReplicas", "maxReplicas", "rdzvBackend", "rdzvPort", "rdzvHost", "rdzvId",
                           "rdzvConf", "standalone", "nProcPerNode", "maxRestarts", "metrics"},
    "replica": {"replicas", "template", "restartPolicy"},
}
_RESTART = ("Always", "OnFailure", "Never", "ExitCode")
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


def _unknown(f, where, obj, allowed) -> list[Problem]:
    extra = sorted(set(obj or {}) - allowed) if isinstance(obj, dict) else []
    return [Problem(f, f"{where}.{k}", f"unknown field (a typo, or the wrong indentation?); PyTorchJob's "
                                       f"{where.split(' ')[-1]} has {', '.join(sorted(allowed))}") for k in extra]


def _check_pytorchjob(path: Path) -> list[Problem]:
    docs, problems = _load(path)
    if problems:
        return problems
    f = path.name
    jobs = [d for d in docs if d.get("kind") == "PyTorchJob"]
    problems += [Problem(f, _name(d), "unexpected here: this file holds one PyTorchJob (kubeflow.org/v1)")
                 for d in docs if d.get("kind") != "PyTorchJob"]
    if len(jobs) != 1:
        return problems + [Problem(f, "PyTorchJob", f"{len(jobs)} PyTorchJobs: write one, kind: PyTorchJob")]
    job = jobs[0]
    where = _name(job)
    if job.get("apiVersion") != "kubeflow.org/v1":
        problems.append(Problem(f, f"{where} apiVersion", f"is {job.get('apiVersion')!r}: the training operator "
                                                          f"serves PyTorchJob as kubeflow.org/v1"))
    name = (job.get("metadata") or {}).get("name", "")
    if not _DNS1035.match(name):
        problems.append(Problem(f, f"{where} metadata.name",
                                "must be a DNS-1035 label (lower case letters, digits, "
                                "'-', starting with a letter): it names pods and Services"))
    spec = job.get("spec") or {}
    problems += _unknown(f, f"{where} spec", spec, _PTJ_FIELDS["spec"])
    problems += _unknown(f, f"{where} spec.runPolicy", spec.get("runPolicy"), _PTJ_FIELDS["spec.runPolicy"])
    problems += _unknown(f, f"{where} spec.elasticPolicy", spec.get("elasticPolicy"), _PTJ_FIELDS["spec.elasticPolicy"])
    nproc = spec.get("nprocPerNode")
    if nproc is not None and not isinstance(nproc, str):
        problems.append(Problem(f, f"{where} spec.nprocPerNode",
                                f"is the number {nproc}: the CRD's type is a string "
                                f"(\"auto\", \"cpu\", \"gpu\" or \"{nproc}\"); quote it"))
    specs = spec.get("pytorchReplicaSpecs") or {}
    for rtype in sorted(set(specs) - {"Master", "Worker"}):
        problems.append(Problem(f, f"{where} spec.pytorchReplicaSpecs.{rtype}",
                                "the replica types are Master and Worker (the operator rejects others)"))
    if "Master" not in specs:
        problems.append(Problem(f, f"{where} spec.pytorchReplicaSpecs.Master",
                                "missing: the Master replica (1 pod) is node 0; the operator sets MASTER_ADDR to its "
                                f"Service ({name}-master-0) and RANK only when there is one"))
    if "Worker" not in specs:
        problems.append(Problem(f, f"{where} spec.pytorchReplicaSpecs.Worker",
                                "missing: the Worker replicas are nodes 1..N-1; without them this is a 1-node job"))
    replicas = {r: (specs[r] or {}).get("replicas", 1) if isinstance(specs[r], dict) else None
                for r in ("Master", "Worker") if r in specs}
    nodes = sum(replicas.values()) if "Master" in specs and all(
        isinstance(n, int) and n >= 0 for n in replicas.values()) else None
    seen = set()  # a YAML alias (template: *pod) is one template: check it once
    for rtype, rs in ((r, specs[r]) for r in ("Master", "Worker") if r in specs):
        rwhere = f"{where} spec.pytorchReplicaSpecs.{rtype}"
        if not isinstance(rs, dict):
            problems.append(Problem(f, rwhere, "must be a mapping with replicas, restartPolicy and template"))
            continue
        problems += _unknown(f, rwhere, rs, _PTJ_FIELDS["replica"])
        n = rs.get("replicas", 1)
        if not isinstance(n, int) or n < (1 if rtype == "Master" else 0):
            problems.append(Problem(f, f"{rwhere}.replicas", f"is {n!r}: a whole number of pods"))
        elif rtype == "Master" and n != 1:
            problems.append(Problem(f, f"{rwhere}.replicas", f"is {n}: there is exactly 1 Master (node 0); more "
                                                             f"nodes are Worker replicas"))
        if rs.get("restartPolicy") not in _RESTART:
            problems.append(Problem(f, f"{rwhere}.restartPolicy",
                                    f"{'not set' if 'restartPolicy' not in rs else repr(rs['restartPolicy'])}: "
                                    f"OnFailure restarts a container that exits non-zero (a crash, or the script's "
                                    f"exit after a checkpoint), as Slurm's --requeue reruns the job; one of "
                                    f"{_RESTART}"))
        template = rs.get("template") or {}
        if id(template) in seen:
            continue
        seen.add(id(template))
        problems += _schema_problems(f, {"apiVersion": "v1", "kind": "PodTemplate",
                                         "metadata": {"name": f"{name}-{rtype.lower()}"}, "template": template},
                                     where=rwhere)
        twhere, pod = f"{rwhere}.template.spec", _get(template, "spec", default={}) or {}
        containers = pod.get("containers") or []
        named = [c for c in containers if isinstance(c, dict) and c.get("name") == "pytorch"]
        if not named:
            problems.append(Problem(f, f"{twhere}.containers",
                                    f"no container named \"pytorch\" (has {[c.get('name') for c in containers]}): "
                                    f"the operator rejects the job, and it sets MASTER_ADDR, RANK, ... only in that "
                                    "one"))
            continue
        container, script = named[0], _script(named[0], name)
        if not _LAUNCHER.search(script):
            problems.append(Problem(f, f"{twhere}.containers.pytorch", "does not run torchrun "
                                                                       "(`python -m torch.distributed.run ...`)"))
            continue
        problems += _common_pod_checks(f, twhere, pod, container, script, nodes)
        tnproc = _opt(script, "nproc-per-node")
        if isinstance(nproc, str) and nproc.isdigit() and tnproc and tnproc.isdigit() and tnproc != nproc:
            problems.append(Problem(f, f"{where} spec.nprocPerNode", f"is {nproc} but torchrun has --nproc-per-node="
                                    f"{tnproc}: the operator's WORLD_SIZE would be wrong; make them equal"))
        if spec.get("elasticPolicy") or (_opt(script, "rdzv-backend") or "static") != "static":
            continue  # c10d: the operator's PET_RDZV_* (elasticPolicy) or your own endpoint
        rank, master = _opt(script, "node-rank"), _opt(script, "master-addr")
        if rank is None or "RANK" not in rank:
            problems.append(Problem(f, f"{twhere} torchrun --node-rank",
                                    f"{_is(rank)}: the operator puts each pod's "
                                    f"node rank in $RANK (Master 0, Worker i: i+1)"))
        if master is None or not ((master.startswith("$") and "MASTER_ADDR" in master)
                                  or _names(master, f"{name}-master-0")):
            problems.append(Problem(f, f"{twhere} torchrun --master-addr",
                                    f"{_is(master)}: node 0 is the Master pod, $MASTER_ADDR ({name}-master-0)"))
        if _opt(script, "master-port") is None:
            problems.append(Problem(f, f"{twhere} torchrun --master-port", "not set: --master-port=$MASTER_PORT"))
    return problems


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0] if args else "labs/lab5_scheduler/k8s")
    problems = validate_manifests(folder)
    for p in problems:
        print(p)
    print(f"{folder}: {'valid' if not problems else f'{len(problems)} problem(s)'} "
          f"(Kubernetes {K8S_VERSION} schema, strict, offline)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
