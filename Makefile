# gpuboot: the two commands a new machine needs are `make demo` and `make test`.
# Both install what they need first (Debian packages, the venv, the lab image).

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMPS := .make
DEB_PACKAGES := podman runc debootstrap dpkg-dev apt-utils gnupg openssh-client iproute2 \
                ca-certificates python3-venv chromium rpm createrepo-c dnf \
                dnf-plugins-core tmux
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: setup demo test test-fast test-gate test-lab test-unit lint bench clean bytecode

setup: $(STAMPS)/system $(STAMPS)/venv $(STAMPS)/promtool $(STAMPS)/image bytecode

# An installed wheel carries its bytecode (pip compiles it); an editable tree has it only
# where Python may write it, and a machine that sets PYTHONDONTWRITEBYTECODE never does:
# every gpuboot process (each test's CLI, each verb the bench times) would compile its
# modules again. Only changed files are compiled; a stale .pyc is never used.
bytecode: $(STAMPS)/venv
	$(BIN)/python -m compileall -q gpuboot lab/gpuboot_lab

# Debian packages: apt-get runs only when one is missing.
$(STAMPS)/system: Makefile
	@mkdir -p $(STAMPS)
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null \
	  | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@# Each lab node's systemd takes 6 inotify instances: the default 128 starves the suite's labs.
	@if [ "$$(sysctl -n fs.inotify.max_user_instances)" -lt 1024 ]; then \
	  sysctl -q -w fs.inotify.max_user_instances=1024; \
	fi
	@touch $@

# Two distributions: the product (.) and the lab (lab/: gpuboot-lab, the `gpuboot lab` verbs).
$(STAMPS)/venv: pyproject.toml lab/pyproject.toml
	@mkdir -p $(STAMPS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,k8s,fast]' -e ./lab
	@touch $@

# promtool (the textfile tests' judge) from Debian's prometheus package, unpacked beside
# the venv: installing the package would also install, and on some hosts start, a server.
$(STAMPS)/promtool: $(STAMPS)/system $(STAMPS)/venv
	@rm -rf $(STAMPS)/prometheus && mkdir -p $(STAMPS)/prometheus
	cd $(STAMPS)/prometheus && { apt-get download -qq prometheus 2>/dev/null \
	  || { apt-get update -qq && apt-get download -qq prometheus 2>/dev/null; }; } \
	  && dpkg-deb -x prometheus_*.deb root
	ln -sf $(CURDIR)/$(STAMPS)/prometheus/root/usr/bin/promtool $(BIN)/promtool
	@touch $@

# The lab node image (debootstrap + podman import, ~90 s once; cached by recipe hash).
$(STAMPS)/image: $(STAMPS)/system $(STAMPS)/venv gpuboot_lab/image/build-node-image.sh
	$(BIN)/gpuboot lab image
	@touch $@

demo: setup
	scripts/demo.sh

# Three tiers, fastest first. The pure tier (no process, no emulator, no lab: seconds)
# fails a broken change before anything slow runs; then lint and the unit tests that start
# processes (minutes); then the lab/molecule/browser tier. tests/tiers.py keeps the pure
# tier honest: a test that starts a process without the subprocess marker fails.
UNIT := not lab and not molecule and not browser

test: test-gate test-lab

test-fast: $(STAMPS)/venv bytecode
	$(BIN)/python -m pytest tests -m "$(UNIT) and not subprocess" -x -q -p no:cacheprovider

# Two workers, a test module each at a time (a module's fixtures are built once): every
# unit test has its own GPUBOOT_HOME and probe lock (tests/conftest.py), so two never meet.
test-gate: test-fast $(STAMPS)/system $(STAMPS)/promtool lint
	$(BIN)/python -m pytest tests -m "$(UNIT) and subprocess" -x -q -n 2 --dist loadfile

# Two workers, a test module each at a time (its lab goes with it): lab tests mostly wait on
# nodes booting and on ssh, so two of them share the two cores well.
test-lab: test-gate $(STAMPS)/image
	$(BIN)/python -m pytest tests -m "lab or molecule or browser" -n 2 --dist loadfile --durations=40

test-unit: $(STAMPS)/venv bytecode
	$(BIN)/python -m pytest tests -m "$(UNIT)"

lint: $(STAMPS)/venv
	$(BIN)/python scripts/check_imports.py  # no lab in the product, no import cycle, pure rules
	$(BIN)/ruff check gpuboot gpuboot_lab scripts tests bench
	$(BIN)/ruff format --check gpuboot gpuboot_lab scripts tests bench
	$(BIN)/yamllint gpuboot/ansible molecule .config
	ANSIBLE_ROLES_PATH=gpuboot/ansible/roles ANSIBLE_COLLECTIONS_PATH=gpuboot/ansible/collections $(BIN)/ansible-lint --profile production --nocolor -q gpuboot/ansible/roles gpuboot/ansible/playbooks

bench: setup
	$(BIN)/python bench/bench.py

.PHONY: bench-fleet
# growth over fleet sizes, direct and through 2 executors (SIZES=10,20,40)
bench-fleet: setup
	$(BIN)/python bench/fleet.py --sizes $(or $(SIZES),10,20,40)

clean:
	rm -rf $(STAMPS) $(VENV) *.egg-info
