# The two commands of the quick start:
#   make demo   installs what is missing, builds Release, runs the main job
#   make test   installs what is missing, builds, runs every test through ctest
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build demo test bench asan clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS)

demo: build
	scripts/demo.sh $(BUILD)/qlens

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

bench: build
	$(BUILD)/bench/bench_ops

# The whole suite under AddressSanitizer and UndefinedBehaviorSanitizer.
asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQLENS_SANITIZE=ON -DQLENS_BUILD_BENCH=OFF
	cmake --build build-asan -j$(JOBS)
	cd build-asan && QLENS_SLOW_TESTS=0 ctest --output-on-failure -j$(JOBS)

clean:
	rm -rf $(BUILD) build-asan
