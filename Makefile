# speechscale: `make demo` and `make test` set up a fresh machine by themselves (a .venv, no root).
# TORCH_SPEC is the pip arguments that install torch, first and pinned, so that nothing else picks the build:
# the CPU build is `torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu`; on PyPI, `torch==2.13.0`
# for Linux x86-64 is the CUDA build (several GB). The default is the plain pin (this project's machines serve
# a CPU wheel under it). Changing TORCH_SPEC re-runs the set-up: the stamp records it.
PYTHON      ?= python3
VENV        ?= .venv
TORCH_SPEC  ?= torch==2.13.0
DEMO_DIR    ?= runs/demo
DEMO_MINUTES ?= 30
DEMO_ARGS   ?=
PYTEST_ARGS ?=
# pytest-xdist workers (0: one process). Each takes a whole test file at a time, and every process of a test runs
# one thread (OMP_NUM_THREADS=1). With three or more, tests/conftest.py sets the last worker aside for the files
# that mostly wait (timeouts, node losses, the soak, audio paced in real time) and the others keep both cores busy
# with the rest (measured: docs/history/test-time.md)
PYTEST_WORKERS ?= 3
# --no-loadscope-reorder: the files in tests/conftest.py's order, those that mostly wait beside the multi-process
# ones, then the costliest first (measured:
# docs/figures/test-time/file-order.json), not xdist's (most tests first, which left the slowest files for last)
# PYTHONDONTWRITEBYTECODE emptied: where a shell sets it, every interpreter the tests start would compile the
# package, and each worker rewrite the test modules' asserts, from source (the cache they write is __pycache__/)
PYTEST_RUN  = PYTHONDONTWRITEBYTECODE= OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder
BIN := $(VENV)/bin

.PHONY: setup demo test test-fast test-evidence lint clean browser deploy-check figures FORCE

setup: $(VENV)/.installed

# the TORCH_SPEC of the last set-up: rewritten (and so newer than the stamps) only when it changes
$(VENV)/.torch-spec: FORCE
	@mkdir -p $(VENV)
	@[ "$$(cat $@ 2>/dev/null)" = "$(TORCH_SPEC)" ] || echo "$(TORCH_SPEC)" > $@

$(VENV)/.installed: pyproject.toml $(VENV)/.torch-spec
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH_SPEC)
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

# the demo's own set-up: the package with what synth and training's logs use, nothing for tests
$(VENV)/.installed-demo: pyproject.toml $(VENV)/.torch-spec
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH_SPEC)
	$(BIN)/pip install --quiet -e '.[synth,tensorboard]'
	touch $@

demo: $(VENV)/.installed-demo
	$(BIN)/speechscale synth --out $(DEMO_DIR)/data --minutes $(DEMO_MINUTES) --seed 0
	$(BIN)/speechscale train --config demo trainer.out_dir=$(DEMO_DIR) data.root=$(DEMO_DIR)/data trainer.resume=auto $(DEMO_ARGS)
	$(BIN)/speechscale eval --checkpoint $(DEMO_DIR)/checkpoints/last.pt --manifest $(DEMO_DIR)/data/test.jsonl
	$(BIN)/speechscale transcribe --checkpoint $(DEMO_DIR)/checkpoints/last.pt --manifest $(DEMO_DIR)/data/test.jsonl \
		$(DEMO_DIR)/data/audio/test/test_000000.wav

# ruff (a small rule set, pyproject.toml) and import-linter (the layers of docs/architecture.md) run first
lint: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/lint-imports

# --durations=15: the slowest tests are named in every run (none should take over 60 s). The browser
# (Debian's chromium, apt) is installed by `make browser` only, which CI runs first: `make test` installs nothing
# outside .venv, and without chromium the page's tests are skipped (a failure under CI=true).
test: setup lint
	$(PYTEST_RUN) -m "not protocol" --durations=15 $(PYTEST_ARGS)

# benchmarks/ (this repository's own figures) tested whole: its renderers (also in make test) and its protocols run
# end to end on tiny settings (the `protocol` marker: LOSO folds, convergence runs, shard seeds, `benchmarks all`)
test-evidence: setup lint
	$(PYTEST_RUN) tests/evidence --durations=15 $(PYTEST_ARGS)

# The web page's tests drive Debian's chromium through chromium-driver. Installed when missing and apt can
# (root, or sudo without a password). If it cannot, apt's last lines are shown; under CI=true that is a
# failure (the browser tests must run there), elsewhere those tests are skipped and say how to install.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  { SUDO=$$( [ "$$(id -u)" = 0 ] || echo "sudo -n" ); \
	    $$SUDO apt-get install -y -q chromium chromium-driver >/tmp/speechscale-apt.log 2>&1 || \
	    { $$SUDO apt-get update -q >>/tmp/speechscale-apt.log 2>&1 && \
	      $$SUDO apt-get install -y -q chromium chromium-driver >>/tmp/speechscale-apt.log 2>&1; } || \
	    { tail -n 5 /tmp/speechscale-apt.log; echo "chromium could not be installed (apt output above)"; \
	      [ "$$CI" != true ] || exit 1; echo "note: the browser tests will be skipped"; }; }

test-fast: setup lint
	$(PYTEST_RUN) -m "not slow and not protocol" --durations=15 $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) runs .pytest_cache

# BENCHMARKS.md's tables re-rendered from the committed JSON under docs/figures by this repository's own tooling
# (benchmarks/, never installed; `python -m benchmarks all --only NAME --out OUT` runs a bench). Runs no bench.
BENCHMARKS_MD ?= BENCHMARKS.md
figures: setup
	$(BIN)/python -m benchmarks all --tables-only --out docs/figures/bench-all --benchmarks $(BENCHMARKS_MD)
	$(BIN)/python -m benchmarks all --gpu --tables-only --out docs/figures/gpu --benchmarks $(BENCHMARKS_MD)

# Not in `make test` (root and apt): a one-node SLURM cluster on this machine runs deploy/slurm/train.sbatch,
# preempts it with `scancel --signal=TERM` after its first checkpoint, and checks that the requeued job resumes
# and ends (deploy/slurm/check.sh prints one JSON line of figures).
deploy-check: setup
	VENV=$(VENV) deploy/slurm/check.sh
