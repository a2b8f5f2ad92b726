# Thin wrapper over CMake. `make` installs missing Debian packages and builds
# build/skiffd; `make run` starts one node; `make test` runs every test.
BUILD      ?= build
GENERATOR  := $(shell command -v ninja >/dev/null 2>&1 && echo Ninja || echo "Unix Makefiles")
CMAKE_ARGS ?=

.PHONY: all deps test-deps build run test unit-test bench bench-compare fuzz asan docs clean

all: build

deps:
	@tools/install-deps.sh build

test-deps:
	@tools/install-deps.sh test

build: deps
	@cmake -S . -B $(BUILD) -G "$(GENERATOR)" $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD)

run: build
	./$(BUILD)/skiffd

# Every test: unit tests (normal and ASan+UBSan builds), fuzz-corpus replay,
# the Release, MinSizeRel and Debug builds (compiled, not run), then the
# integration suites against real clients and servers.
test: test-deps build
	@tests/run.sh

unit-test: build
	@cd $(BUILD) && ctest --output-on-failure

# SKIFF_BENCH_ONLY=cluster: only the cluster part (bench/cluster.sh); BENCH_CLUSTER=0: without it.
# SKIFF_BENCH_ONLY=zones: only the zones part (bench/zones.sh, root); BENCH_ZONES=0: without it.
# SKIFF_BENCH_ONLY=txn: only the transactions part (bench/txn.py); BENCH_TXN=0: without it.
bench: test-deps build
	@SKIFF_BUILD=$${SKIFF_BUILD:-$(BUILD)} bench/run.sh

# Skiff against Apache Kafka 4.3.1 (fetched from Maven Central); about 25 min;
# rewrites the generated section of docs/benchmarks.md and docs/benchmarks/*.png.
bench-compare: build
	@tools/install-deps.sh bench
	@bench/compare.sh

fuzz: test-deps
	@tests/fuzz/run.sh

docs: build
	./$(BUILD)/skiffd --gen-config-doc > docs/CONFIGURATION.md

clean:
	rm -rf $(BUILD) build-asan build-fuzz build-release build-minsizerel build-debug
