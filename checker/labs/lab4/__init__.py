"""Lab 4 checks: each incident fixed (the job completes under the incident's conditions and trains
correctly) and diagnosed (the right cause, and an evidence line that really occurs in the log of
the faulty job, which the checker runs itself); then the forensics analysers, on evidence the checker makes.

Fixed runs: the learner's job (their incidentN.py pieces in the course's job.py) under torchrun,
conditions from the course's own scenarios.py (course.py), moved by the hidden variant. The worker (tasks.py)
times the learner's after_step/train_step and counts all-reduced bytes itself. Faulty runs (evidence.py): the
pristine starter, generated from solutions/ into a private tree, launched by its run.py exactly as a
learner runs it, at the public variant (what the learner saw); its log is kept under runs/lab4/evidence/
(reused while the sources are unchanged). checks.py decides the incidents' checks, forensics.py the analysers'.
"""
LAB = "lab4"
WORLD_SIZE = 2
WHERE = "labs/lab4_debugging"
INCIDENTS = range(1, 9)
