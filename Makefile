# Thin wrapper over the CMake presets (CMakePresets.json). `make help` lists the targets.
SHELL := /bin/bash
FUZZ_SECONDS ?= 60

.PHONY: help demo deps test tsan long release bench fuzz fuzz-replay format clean board

help:
	@echo "make demo         build release; allreduce loop and data-parallel SGD on 4 ranks (local-4.toml)"
	@echo "make test         install missing packages, build the dev preset (ASan+UBSan), run ctest"
	@echo "make tsan         build the tsan preset and run the tests labelled 'concurrency'"
	@echo "make long         the full-size transport proofs (label 'long') from a release build"
	@echo "make release      build the release preset (binaries in build/bin)"
	@echo "make bench        run the benchmarks; CSV and PNG plots land in build/bench"
	@echo "make fuzz         run every libFuzzer target for FUZZ_SECONDS (default $(FUZZ_SECONDS)) each"
	@echo "make fuzz-replay  replay the seed corpus through every fuzz target (what CI does)"
	@echo "make format       clang-format every C/C++ source in place"
	@echo "make board        cross-compile the C99 board library and the STM32F103 example (sizes)"

deps:
	@scripts/setup-deps

# README's first command: missing packages, a release build of only what the demo runs (the
# launcher and two examples), then ring_allreduce and data_parallel_sgd under vessel-run on the
# 4-rank topology, one progress bar each and a summary table (scripts/demo).
DEMO_BUILD ?= build
DEMO_TOPOLOGY ?= examples/topologies/local-4.toml
demo: deps
	cmake --preset release -B $(DEMO_BUILD)
	cmake --build $(DEMO_BUILD) --target vessel-run ring_allreduce data_parallel_sgd
	scripts/demo $(DEMO_BUILD) $(DEMO_TOPOLOGY)

test: deps
	cmake --preset dev
	cmake --build --preset dev
	ctest --preset dev

tsan: deps
	cmake --preset tsan
	cmake --build --preset tsan
	ctest --preset tsan

# The issue's full-size transport proofs (1 GiB over TCP; 10 M frames and 10 GiB over shm between
# two processes), from the release preset: only their binary is built, and they run one at a time.
long: deps
	cmake --preset release
	cmake --build --preset long
	ctest --preset long

release: deps
	cmake --preset release
	cmake --build --preset release

bench: release
	bench/run.sh build

fuzz: deps
	cmake --preset fuzz
	cmake --build --preset fuzz --target fuzzers
	tests/fuzz/run.sh build/fuzz $(FUZZ_SECONDS)

fuzz-replay: deps
	cmake --preset fuzz
	cmake --build --preset fuzz --target fuzzers
	tests/fuzz/run.sh build/fuzz 0

# The board-side C99 library for Cortex-M3 and the STM32F103C8T6 example firmware (build/board).
board: deps
	scripts/cross-board build/board

format:
	git ls-files '*.cpp' '*.hpp' '*.c' '*.h' | xargs clang-format -i

clean:
	rm -rf build
