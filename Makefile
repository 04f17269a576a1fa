# Every target sets itself up: a fresh machine needs only python3 (3.10+) with venv and pip.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
DURATIONS ?= 25  # the slowest tests make test lists at the end (0: every one)

.PHONY: setup data demo test test-exhaustive test-full test-fast bench lab starters slides handout slurm-up slurm-down clean

# The torch release CI grades on (labs/common/compat.py: TESTED), installed only into a venv without a torch: one
# that has a torch of the supported range keeps it (VENV_ARGS=--system-site-packages uses a GPU node's own torch).
TORCH_TESTED := 2.13.0
VENV_ARGS ?=

$(STAMP): pyproject.toml
	@echo "setup 1/3: a virtual environment in $(VENV)/ (~5 s)"
	$(PYTHON) -m venv $(VENV_ARGS) $(VENV)
	@echo "setup 2/3: pip install -e '.[dev]': torch (CPU), JupyterLab, the course (~2-4 min, ~1.5 GB; quiet until done)"
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install --quiet "torch==$(TORCH_TESTED)"
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

setup: $(STAMP) data  ## everything a learner needs: virtual environment, the course installed (editable), the data

data: $(STAMP)  ## the generated Markov corpora for the tiny and small models
	@echo "setup 3/3: the generated training data in data/ (~10 s the first time, 17 MB)"
	$(BIN)/python -m labs.common.data --vocab 256 4096
	@echo "set up: \`make lab\` opens JupyterLab; grade yourself with \`.venv/bin/checker grade lab1\`"

demo: setup data  ## grade every reference solution on this machine and print the report cards
	@if [ "$$(id -u)" = 0 ]; then checker/slurm_local.sh up; \
	 else echo "not root: no local Slurm started; without a Slurm answering, lab 5's scheduler checks are NOT RUN, each saying how to run it"; fi
	$(BIN)/checker grade --all --solutions

test: setup  ## the suite: units, checker contract, end-to-end grades, each lab's first mutant, notebooks (nbval)
	COURSE_TARGET=solutions $(BIN)/pytest -m "not exhaustive and not full" --nbval-lax --durations=$(DURATIONS) tests labs

test-exhaustive: setup  ## CI's second tier, after make test: the other mutants and mistakes, starters, browser, labs 4, 5, 8's notebooks, ...
	COURSE_TARGET=solutions $(BIN)/pytest -m exhaustive --nbval-lax --durations=10 tests labs

test-full: setup  ## beyond CI (~25 min): the blind mutants of labs 4, 5, 6 and 8 (make bench grades every mutant too)
	COURSE_TARGET=solutions $(BIN)/pytest -m full --durations=10 tests

test-fast: setup  ## everything but the slow end-to-end runs
	COURSE_TARGET=solutions $(BIN)/pytest -m "not slow" tests

bench: setup data  ## measured figures -> bench/results.json and bench/RESULTS.md
	$(BIN)/python -m bench.run

lab: setup data  ## JupyterLab on the labs
	$(BIN)/jupyter lab labs

starters: setup  ## regenerate labs/*/*.py from solutions/ (never edit starters by hand)
	$(BIN)/python -m checker.starters

handout:  ## the course without solutions/ and tests/, for a graded class: make handout DEST=folder (checker/handout.py)
	python3 -m checker.handout $(or $(DEST),build/handout)

slides: setup  ## one self-contained HTML deck per lab -> build/slides/ (figures from bench/results.json)
	$(BIN)/python slides/build.py

slurm-up:  ## a real single-node Slurm on this machine for lab 5 (root: installs munge + Slurm, starts the daemons)
	checker/slurm_local.sh up

slurm-down:  ## stop it
	checker/slurm_local.sh down

clean:
	rm -rf $(VENV) data runs build .pytest_cache

.PHONY: gpu-check
gpu-check: setup  ## a GPU node (<= 8 min): doctor, lab 1 on CUDA, gpt2-124m MFU, labs 2/3/6/9 (NCCL, a rank per GPU; gloo on one) -> bench/RESULTS-gpu.md
	$(BIN)/python -m bench.gpu_check
