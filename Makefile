# The README's commands. Each target bootstraps what it needs on a fresh Debian 12 or 13 machine.
VENV    ?= .venv
PY      := $(abspath $(VENV))/bin/python
BUILD   ?= build
JOBS    ?= 2
CMAKE   := cmake
ROOT    := $(CURDIR)

.PHONY: all bootstrap install cpp-test python-test test test-debian13 asan-test clang-test fuzz lint demo examples bench bench-per-call bench-load bench-e2e sweep performance generate scratch-operator clean

all: test

$(VENV)/.bootstrapped: scripts/bootstrap.sh
	scripts/bootstrap.sh $(VENV)
	touch $@

bootstrap: $(VENV)/.bootstrapped

# Installs the package into the venv (offline: Debian's setuptools and pybind11, no build isolation).
install: bootstrap
	$(PY) -m pip install --no-build-isolation --no-deps --quiet $(ROOT)

cpp-test: bootstrap
	$(CMAKE) -S . -B $(BUILD)/cpp -DSPATIALGRAD_BUILD_TESTS=ON -DSPATIALGRAD_BUILD_BENCHMARKS=ON
	$(CMAKE) --build $(BUILD)/cpp -j $(JOBS)
	ctest --test-dir $(BUILD)/cpp --output-on-failure -j $(JOBS)

# pytest runs from outside the source tree so that it imports the installed package.
python-test: install
	cd /tmp && SPATIALGRAD_SOURCE_DIR=$(ROOT) SPATIALGRAD_REQUIRE_TORCH=$${SPATIALGRAD_REQUIRE_TORCH:-1} $(PY) -m pytest -p no:cacheprovider -q $(ROOT)/tests/python

test: cpp-test python-test

# The files made from the operator table (operators.toml), design.md's table of strategies among them; tests fail
# while one is stale.
generate: bootstrap
	$(PY) scripts/generate_operators.py

# Adds the scratch operator copy2d (tests/scratch_operator/) to a copy of the repository: at most 8 hand-written
# files, built and tested there (docs/design.md, "Adding an operator").
scratch-operator: bootstrap
	JOBS=$(JOBS) scripts/scratch_operator.sh $(PY)

# make test and make demo in a clean clone of HEAD inside a Debian 13 root (PyTorch 2.6, NumPy 2.2, gcc 14; made
# once by debootstrap under build/debian13/ and reused; needs root). DEBIAN13_ARGS passes options and a command,
# e.g. make test-debian13 DEBIAN13_ARGS="--worktree make bench".
test-debian13:
	scripts/debian13.sh $(DEBIAN13_ARGS)

# The C++ suite under AddressSanitizer + UndefinedBehaviorSanitizer, in its own build directory.
asan-test: bootstrap
	$(CMAKE) -S . -B $(BUILD)/asan -DCMAKE_BUILD_TYPE=Debug -DSPATIALGRAD_BUILD_TESTS=ON -DSPATIALGRAD_SANITIZE=ON
	$(CMAKE) --build $(BUILD)/asan -j $(JOBS)
	ctest --test-dir $(BUILD)/asan --output-on-failure -j $(JOBS)

# The C++ suite built with the release's clang (14 on Debian 12, 19 on Debian 13; the library builds with GCC and
# clang, every instruction level with both).
CLANG_CC  ?= clang
CLANG_CXX ?= clang++
clang-test: bootstrap
	CC=$(CLANG_CC) CXX=$(CLANG_CXX) $(CMAKE) -S . -B $(BUILD)/clang -DSPATIALGRAD_BUILD_TESTS=ON
	$(CMAKE) --build $(BUILD)/clang -j $(JOBS)
	ctest --test-dir $(BUILD)/clang --output-on-failure -j $(JOBS)

# libFuzzer over the aclnn C API (ASan + UBSan) for FUZZ_SECONDS, from the seed corpus (copied: new
# inputs go to a temporary directory, not into the repository).
FUZZ_SECONDS ?= 60
fuzz: bootstrap
	CC=$(CLANG_CC) CXX=$(CLANG_CXX) $(CMAKE) -S . -B $(BUILD)/fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DSPATIALGRAD_BUILD_FUZZ=ON -DSPATIALGRAD_BUILD_ACLNN=OFF
	$(CMAKE) --build $(BUILD)/fuzz --target aclnn_fuzz -j $(JOBS)
	corpus=$$(mktemp -d) && cp tests/fuzz/corpus/* $$corpus/ && \
	  SPATIALGRAD_NUM_THREADS=2 $(BUILD)/fuzz/aclnn_fuzz -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
	  -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=$(BUILD)/fuzz/ $$corpus; status=$$?; rm -rf $$corpus; exit $$status

# The kernel-vocabulary rules: SIMD only in csrc/src/detail/, functions in csrc/src <= 80 lines, nesting <= 5.
lint: bootstrap
	$(CMAKE) -S . -B $(BUILD)/lint -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DSPATIALGRAD_BUILD_ACLNN=OFF > /dev/null
	scripts/lint.sh $(BUILD)/lint

# The quick start, then a tiny detector trained with all five operators (gradients checked against torch).
demo: install
	$(PY) examples/quickstart.py
	$(PY) examples/train_tiny_detector.py

# The other examples, as CI runs them: the NumPy vjp script, the gradient penalty (second order), DDP on two
# processes (checked against one process), the notebook, executed headlessly, the Ascend check and the ONNX
# export (run in ONNX Runtime where the release has it).
examples: install
	$(PY) examples/numpy_vjp.py
	$(PY) examples/gradient_penalty.py
	$(PY) examples/train_ddp.py --steps 10
	$(PY) scripts/run_notebook.py examples/explore.ipynb
	$(PY) examples/ascend_check.py
	$(PY) examples/export_onnx.py

# make bench and make sweep write their JSON under bench/results/pytorch-<major.minor>/ (one folder per PyTorch
# release): compare-$(RUN).json, per_call-$(RUN).json, sweep-$(RUN).json. RUN=2 adds a second run beside the first
# (the page takes each side's best time over the runs); make performance renders docs/performance.md, docs/bench.png
# and the README's summary table from every committed result file.
RUN     ?= 1
RESULTS  = $$($(PY) bench/common.py results-dir)

bench: install
	results=$(RESULTS) && $(PY) bench/compare.py --json $$results/compare-$(RUN).json && \
	  $(PY) bench/per_call.py --json $$results/per_call-$(RUN).json

# Each operator per call on tiny and small inputs through spatialgrad.torch against PyTorch's own, forward and
# fwd+bwd (the fixed cost of a call); PER_CALL_ARGS passes options, e.g. PER_CALL_ARGS="--ops roi_align".
bench-per-call: install
	$(PY) bench/per_call.py $(PER_CALL_ARGS)

# Each operator's fwd+bwd alone and beside 1 and 2 busy processes (started and killed by the script), ours
# from NumPy and from spatialgrad.torch against PyTorch's; LOAD_ARGS passes options, e.g. LOAD_ARGS="--ops roi_align".
bench-load: install
	$(PY) bench/load.py $(LOAD_ARGS)

# Training steps of three models (Deformable-DETR encoder, spatial transformer, FPN decoder), PyTorch's operators
# against ours, in the default environment and with OMP_WAIT_POLICY=PASSIVE (alternated child processes).
bench-e2e: install
	$(PY) bench/e2e.py $(E2E_ARGS)

# Every operator on the shapes users run (bench/sweep_ops/), against PyTorch: ratios and scratch memory.
# SWEEP_ARGS passes options, e.g. make sweep SWEEP_ARGS="--quick" (0.1 s per row, no plane beyond 4096x4096);
# a run of some rows only (SWEEP_ARGS="--ops grid_sampler_2d") writes a partial result file: commit full runs.
sweep: install
	$(PY) bench/sweep.py --json $(RESULTS)/sweep-$(RUN).json $(SWEEP_ARGS)

# docs/performance.md, docs/bench.png and the README's performance summary, from bench/results/ (no benchmark runs;
# tests/python/test_performance_page.py checks that the committed page is what this renders).
performance: bootstrap
	$(PY) scripts/render_performance.py

clean:
	rm -rf $(BUILD) *.egg-info python/*.egg-info
