"""Lab 5's Kubernetes manifests: the solution validates clean offline, each typical mistake is named, the
starter fails, and the shell wrapper inside the pods turns each ending into the exit code the Job acts on."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
import yaml

from checker.labs.lab5 import k8s
from checker.starters import strip_solutions
from conftest import ROOT

K8S = ROOT / "solutions" / "lab5_scheduler" / "k8s"
FILES = (k8s.JOB_FILE, k8s.PYTORCHJOB_FILE)


def load(name: str) -> list[dict]:
    return list(yaml.safe_load_all((K8S / name).read_text()))


def problems_after(tmp_path, mutate_job=None, mutate_ptj=None) -> list[str]:
    """Write both solution manifests to tmp_path, the one(s) given mutated in place, and validate."""
    for name, mutate in ((k8s.JOB_FILE, mutate_job), (k8s.PYTORCHJOB_FILE, mutate_ptj)):
        docs = load(name)
        if mutate:
            mutate(*docs)
        (tmp_path / name).write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return [str(p) for p in k8s.validate_manifests(tmp_path)]


def pod(job):
    return job["spec"]["template"]["spec"]


def script(container: dict) -> str:
    return container["args"][0]


def set_script(container: dict, old: str, new: str):
    assert old in container["args"][0]
    container["args"][0] = container["args"][0].replace(old, new)


def test_solution_manifests_are_valid_offline():
    problems = k8s.validate_manifests(K8S)
    assert problems == [], "\n".join(map(str, problems))


def test_the_schema_is_pinned_and_shipped_with_the_package():
    import kubernetes_validate.utils as kvu
    assert k8s.K8S_VERSION in {kvu.major_minor(v) for v in kvu.all_versions()}


def _drop(key):
    return lambda svc, job: job["spec"].pop(key)


def _rdzv(old, new):
    return lambda svc, job: set_script(pod(job)["containers"][0], old, new)


@pytest.mark.parametrize("mutate,expected", [
    (_drop("completionMode"), "spec.completionMode: not set"),
    (lambda svc, job: job["spec"].update(completionMode="indexed"), "is 'indexed'"),
    (lambda svc, job: job["spec"].update(parallelism=1), "spec.parallelism: is 1 but completions is 2"),
    (lambda svc, job: pod(job).update(subdomain="workers"), "subdomain: is 'workers'"),
    (lambda svc, job: svc["spec"].update(selector={"app": "lab5"}), "Service/lab5-train spec.selector"),
    (lambda svc, job: svc["spec"].pop("clusterIP"), "no headless Service"),
    (_rdzv("--nnodes=2", "--nnodes=3"), "torchrun --nnodes: is 3, but 2 pods"),
    (_rdzv("--node-rank=$JOB_COMPLETION_INDEX", "--node-rank=0"), "--node-rank: is 0"),
    (_rdzv("lab5-train-0.lab5-train", "lab5-train"), "--master-addr: is lab5-train:"),
    (lambda svc, job: pod(job).pop("terminationGracePeriodSeconds"), "terminationGracePeriodSeconds: not set"),
    (lambda svc, job: pod(job).update(terminationGracePeriodSeconds=5), "is 5 s, under 30 s"),
    (lambda svc, job: [job["spec"].pop(k) for k in ("backoffLimit", "podFailurePolicy")], "--requeue"),
    (lambda svc, job: pod(job).update(restartPolicy="OnFailure"), "podFailurePolicy: needs restartPolicy: Never"),
    (_rdzv("trap ", "# trap "), "PID 1"),
    (_rdzv('--out "$out"', "--out runs/lab5"), "--out runs/lab5 is not on a PersistentVolumeClaim"),
    (lambda svc, job: pod(job)["containers"][0].pop("resources"), "no cpu or memory request"),
    # a misspelled field: only the strict schema knows it is not Kubernetes'
    (lambda svc, job: job["spec"].update(backofLimit=job["spec"].pop("backoffLimit")), "'backofLimit' was unexpected"),
    (lambda svc, job: job["spec"].update(parallelism="2"), "'2' is not of type 'integer'"),
])
def test_each_mistake_in_the_indexed_job_is_named(tmp_path, mutate, expected):
    problems = problems_after(tmp_path, mutate_job=mutate)
    assert any(expected in p for p in problems), "\n".join(problems)
    assert all(p.startswith(k8s.JOB_FILE) for p in problems), "\n".join(problems)


def test_c10d_rendezvous_at_node_0s_name_is_accepted_too(tmp_path):
    c10d = "--nnodes=2 --rdzv-backend=c10d --rdzv-endpoint=lab5-train-0.lab5-train.default.svc.cluster.local:29400"
    problems = problems_after(tmp_path, mutate_job=_rdzv(
        "--nnodes=2 --node-rank=$JOB_COMPLETION_INDEX --master-addr=lab5-train-0.lab5-train --master-port=29500", c10d))
    assert problems == [], problems
    wrong = problems_after(tmp_path, mutate_job=_rdzv("lab5-train-0.lab5-train --master-port",
                                                      "lab5-train-1.lab5-train --master-port"))
    assert any("lab5-train-0.lab5-train" in p for p in wrong), wrong


def _ptj_specs(job):
    return job["spec"]["pytorchReplicaSpecs"]


def _ptj_container(job):
    return _ptj_specs(job)["Master"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("mutate,expected", [
    (lambda job: _ptj_specs(job).pop("Master"), "pytorchReplicaSpecs.Master: missing"),
    (lambda job: _ptj_specs(job).pop("Worker"), "pytorchReplicaSpecs.Worker: missing"),
    (lambda job: _ptj_specs(job)["Master"].update(replicas=2), "exactly 1 Master"),
    (lambda job: _ptj_specs(job)["Worker"].pop("restartPolicy"), "Worker.restartPolicy: not set"),
    (lambda job: _ptj_container(job).update(name="trainer"), 'no container named "pytorch"'),
    (lambda job: job.update(apiVersion="kubeflow.org/v2"), "kubeflow.org/v1"),
    (lambda job: job["spec"].update(nprocPerNode=2), "quote it"),
    (lambda job: job["spec"].update(pytorchReplicaSpec=job["spec"].pop("pytorchReplicaSpecs")), "unknown field"),
    (lambda job: _ptj_specs(job)["Worker"].update(replicas=2), "torchrun --nnodes: is 2, but 3 pods"),
    (lambda job: set_script(_ptj_container(job), "--master-addr=$MASTER_ADDR", "--master-addr=localhost"),
     "$MASTER_ADDR (lab5-train-master-0)"),
    # inside the pod template: the core schema, strict, finds the typo
    (lambda job: _ptj_specs(job)["Master"]["template"]["spec"].update(
        terminationGracePeriodSecond=90), "'terminationGracePeriodSecond' was unexpected"),
])
def test_each_mistake_in_the_pytorchjob_is_named(tmp_path, mutate, expected):
    problems = problems_after(tmp_path, mutate_ptj=lambda job: mutate(job))
    assert any(expected in p for p in problems), "\n".join(problems)
    assert all(p.startswith(k8s.PYTORCHJOB_FILE) for p in problems), "\n".join(problems)


def test_missing_and_unparseable_files_are_problems_not_crashes(tmp_path):
    problems = [str(p) for p in k8s.validate_manifests(tmp_path)]
    assert len(problems) == 2 and all("missing" in p for p in problems)
    (tmp_path / k8s.JOB_FILE).write_text("spec:\n  completions: 2\n    parallelism: 2\n")
    assert any("does not parse" in str(p) for p in k8s.validate_manifests(tmp_path))


def test_the_starters_parse_and_fail_with_a_hint_for_each_cut(tmp_path):
    for name in FILES:
        text = strip_solutions((K8S / name).read_text(), "lab5", name)
        assert "BEGIN SOLUTION" not in text and "TODO(lab5)" in text
        assert list(yaml.safe_load_all(text))  # still YAML: kubectl would read it
        (tmp_path / name).write_text(text)
    problems = [str(p) for p in k8s.validate_manifests(tmp_path)]
    for cut in ("completionMode", "subdomain", "--nnodes", "--master-addr", "terminationGracePeriodSeconds",
                "--requeue"):
        assert any(cut in p and p.startswith(k8s.JOB_FILE) for p in problems), (cut, problems)
    assert any(p.startswith(k8s.PYTORCHJOB_FILE) and "$RANK" in p for p in problems), problems


# ------------------------------------------------------------------ the shell wrapper inside the pods
FAKE_LAUNCHER = """#!/bin/bash
# stands in for `python -m torch.distributed.run ... --out DIR`: writes the record rank 0 would write last
while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
mkdir -p "$out"
case $FAKE in
  finished)  echo '{"rank": 0, "event": "finished", "step": 200}' >> "$out/log.jsonl"; exit 0 ;;
  preempted) echo '{"rank": 0, "event": "preempted", "step": 41}' >> "$out/log.jsonl"; exit 0 ;;
  crash)     exit 3 ;;
  stale)     echo '{"rank": 0, "event": "preempted", "step": 41}' >> "$out/log.jsonl"; \
exit 3 ;;  # a crash after a requeue
  signalled) trap 'echo "{\\"rank\\": 0, \\"event\\": \\"preempted\\"}" >> "$out/log.jsonl"; exit 1' TERM
             touch "$out/started"; while :; do sleep 0.05; done ;;
esac
"""


def run_wrapper(tmp_path, manifest: str, fake: str) -> int:
    docs = load(manifest)
    container = (pod(docs[1])["containers"][0] if manifest == k8s.JOB_FILE
                 else _ptj_container(docs[0]))
    text = script(container).replace("/ckpt", str(tmp_path / "ckpt"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python").write_text(FAKE_LAUNCHER)
    (bin_dir / "python").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE": fake, "JOB_UID": "u1", "JOB_NAME": "j",
           "JOB_COMPLETION_INDEX": "1", "RANK": "1", "MASTER_ADDR": "m", "MASTER_PORT": "23456", "HOSTNAME": "h"}
    proc = subprocess.Popen(["bash", "-c", text], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if fake == "signalled":  # what the kubelet does to the container's PID 1
        started = next((tmp_path / "ckpt").rglob("started"), None) if (tmp_path / "ckpt").exists() else None
        deadline = time.monotonic() + 10
        while started is None and time.monotonic() < deadline:
            time.sleep(0.02)
            started = next((tmp_path / "ckpt").rglob("started"), None) if (tmp_path / "ckpt").exists() else None
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=10)
    finally:
        proc.kill()


@pytest.mark.parametrize("manifest", FILES)
@pytest.mark.parametrize("fake,code", [("finished", 0), ("preempted", 75), ("signalled", 75), ("crash", 3),
                                       ("stale", 3)])
def test_the_wrapper_exit_code_says_finished_requeue_or_failed(tmp_path, manifest, fake, code):
    assert run_wrapper(tmp_path, manifest, fake) == code


@pytest.mark.parametrize("manifest", FILES)
def test_the_wrapper_is_valid_bash(manifest):
    docs = load(manifest)
    container = pod(docs[1])["containers"][0] if manifest == k8s.JOB_FILE else _ptj_container(docs[0])
    assert subprocess.run(["bash", "-n", "-c", script(container)], capture_output=True, timeout=10).returncode == 0
