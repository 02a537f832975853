# Two commands a new user needs (see README):
#   make run    build, then run the main job on the default model
#   make test   build (Release with assertions) and run the whole test suite
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: deps build run test test-asan bench clean

deps:
	./scripts/install-deps.sh

build:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/bin/npu doctor
	$(BUILD)/bin/npu bench kernels --quick

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The sanitizer build of the tests (CI runs it too).
test-asan:
	cmake -S . -B $(BUILD)-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DXDNA_SANITIZE=ON -DXDNA_BUILD_BENCH=OFF
	cmake --build $(BUILD)-asan -j $(JOBS)
	ctest --test-dir $(BUILD)-asan --output-on-failure -j $(JOBS) -LE slow

bench: build
	$(BUILD)/bin/npu bench kernels

clean:
	rm -rf $(BUILD) $(BUILD)-asan
