# embodied_ws — `make train` trains the default policy, `make test` runs the tests.
# Both run `make setup` first (idempotent: a second run only checks a stamp).
SHELL := /bin/bash
PYTHON ?= $(shell for p in $$(ls -d $$(pyenv root 2>/dev/null)/versions/3.12.*/bin/python3 2>/dev/null) $$(command -v python3.12) /usr/bin/python3.12; do "$$p" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null && echo "$$p" && break; done)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.setup-stamp
RUN ?= reach
# uv (pinned, parallel) installs the lock; INSTALLER=pip uses pip instead (slower)
INSTALLER ?= uv
# llama-cpp-python build: empty = auto (CUDA when nvidia-smi and nvcc are found), 0 = CPU, 1 = CUDA
CUDA ?=
APT_PACKAGES := libegl1 libegl-mesa0 libgl1 libosmesa6 ignition-tools libsdformat-dev ffmpeg
export MUJOCO_GL ?= egl
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: setup llama train test lint bench lock clean print-apt-packages

setup: $(STAMP) llama

# runs on every setup; does nothing when the recorded build (.venv/.llama-build.json) is the one wanted
llama: $(STAMP)
	@$(BIN)/python scripts/llama_build.py --venv $(VENV) --cuda "$(CUDA)"

$(STAMP): requirements/base.txt requirements/lock.txt requirements/ros.txt requirements/ros-lock.txt setup.py scripts/setup_venv.py
	@if [ -z "$(PYTHON)" ]; then echo "error: Python 3.12 not found (install it or pass PYTHON=/path/to/python3.12)"; exit 2; fi
	@bash scripts/apt_deps.sh $(APT_PACKAGES)
	@[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/python scripts/setup_venv.py --venv $(VENV) --cuda "$(CUDA)" --installer $(INSTALLER)
	@touch $(STAMP)

train: setup
	$(BIN)/embodied-ws train --config reach --name $(RUN) $(if $(wildcard runs/$(RUN)/checkpoints/latest),--resume,)

# The tests without ROS run in parallel on the cores (pytest-xdist, at most 4 workers; TEST_WORKERS=0: in one
# process); the ROS tests run after them on their own: their nodes keep rates in real time, and beside a
# busy worker on 2 cores a 25-Hz state source fell to 21 Hz. Both runs print their summary; either failing fails.
TEST_WORKERS ?= $(shell n=$$(nproc); echo $$(( n < 4 ? n : 4 )))
test: setup
	@rc=0; \
	$(BIN)/python -m pytest tests -m "not ros" -n $(TEST_WORKERS) --dist loadfile || rc=$$?; \
	$(BIN)/python -m pytest tests -m ros || rc=$$?; \
	exit $$rc

lint: setup
	$(BIN)/ruff check embodied_ws tests bench

bench: setup
	$(BIN)/python bench/sim_throughput.py
	$(BIN)/python bench/train_throughput.py
	$(BIN)/python bench/triage.py
	$(BIN)/python bench/ros_bridge.py

lock: setup
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^ros-' > requirements/lock.txt
	$(BIN)/python -m pip freeze --exclude-editable | grep '^ros-' > requirements/ros-lock.txt

print-apt-packages:  # for docker/Dockerfile's runtime stage
	@echo $(APT_PACKAGES)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
