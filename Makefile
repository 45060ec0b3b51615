# The README's commands. Each target bootstraps what it needs on a fresh Debian 12 machine.
VENV    ?= .venv
PY      := $(abspath $(VENV))/bin/python
BUILD   ?= build
JOBS    ?= 2
CMAKE   := cmake
ROOT    := $(CURDIR)

.PHONY: all bootstrap install cpp-test python-test test asan-test demo bench clean

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

# The C++ suite under AddressSanitizer + UndefinedBehaviorSanitizer, in its own build directory.
asan-test: bootstrap
	$(CMAKE) -S . -B $(BUILD)/asan -DCMAKE_BUILD_TYPE=Debug -DSPATIALGRAD_BUILD_TESTS=ON -DSPATIALGRAD_SANITIZE=ON
	$(CMAKE) --build $(BUILD)/asan -j $(JOBS)
	ctest --test-dir $(BUILD)/asan --output-on-failure -j $(JOBS)

demo: install
	$(PY) examples/quickstart.py

bench: install
	$(PY) bench/compare.py

clean:
	rm -rf $(BUILD) *.egg-info python/*.egg-info
