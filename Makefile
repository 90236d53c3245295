# Every target bootstraps .venv when it is missing.
# TORCH_SPEC lets other machines choose their torch (e.g. TORCH_SPEC='torch>=2.4' on a CUDA box).
PYTHON ?= python3
TORCH_SPEC ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ORACLE := $(VENV)/.oracle
DOCS := $(VENV)/.docs

.PHONY: demo test test-fast test-tiers test-latest lock fuzz bench lint docs clean-venv gpu-check gpu-wheels \
	gpu-check-dryrun gpu-campaign-dryrun readme-numbers tour-record frontier-2026

# The test environment is locked: requirements-test.lock (every package the suite and its oracles
# need, at the versions the suite passed with; `make lock` writes it) constrains every install
# below, so a clone today and a clone next month install the same set. pyproject.toml keeps the
# library's ranges for users. `make test-latest` installs without the lock, into .venv-latest, to
# find a breaking upstream release on purpose. LOCK= (empty) turns the lock off.
LOCK ?= requirements-test.lock
NODEPS := test-oracles-nodeps.txt
PIN := $(if $(LOCK),-c $(LOCK))

$(STAMP): pyproject.toml $(LOCK) $(NODEPS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade $(PIN) pip setuptools wheel
	# torch first, so no dependency can pull a different (CUDA) build
	$(BIN)/python -m pip install --quiet $(PIN) "$(TORCH_SPEC)"
	# no build isolation: the package builds with the setuptools just installed (locked), not
	# with whatever release is newest today
	$(BIN)/python -m pip install --quiet --no-build-isolation $(PIN) -e '.[dev]'
	touch $(STAMP)

# requirements-test.lock from requirements-test.in (uv pip compile, for CPython 3.11 on x86_64
# Linux, the CI machine), then `make test` on the new lock before committing it. Without the
# network: one line, and the old lock stays.
lock:
	@bash scripts/lock.sh

# WORKERS: runs in parallel (one torch thread each); `make demo WORKERS=1` on one core.
# DEMO_STEPS: fewer training steps (tests/test_readme_tour.py runs the README's lines quickly).
# The last line says how to put recall-lab on PATH: the README's next lines type it bare.
WORKERS ?= 2
DEMO_STEPS ?=
demo: $(STAMP)
	$(BIN)/recall-lab demo --workers $(WORKERS) $(if $(DEMO_STEPS),--steps $(DEMO_STEPS))
	@echo "recall-lab is installed in .venv: run 'source .venv/bin/activate' to type it as" \
		"recall-lab (the README's next lines do), or call .venv/bin/recall-lab"

# the README's generated sections (the tour's wall times and numbers, one line per experiment's
# report) from the committed records; tests/test_readme_numbers.py checks that they are current
readme-numbers:
	$(PYTHON) scripts/readme_numbers.py

# docs/results/frontier-2026/: the combined README and figure from the placements' records, and
# the shipped frontier-2026 reference packed from them (tests/experiments/test_frontier_2026.py)
frontier-2026: $(STAMP)
	$(BIN)/python scripts/frontier_2026.py

# re-run the README's tour, its lines as printed and nothing pinned (no core affinity, the lab's
# default threads), into its record (docs/results/tour/record.json; minutes: the tiny sweep),
# then `make readme-numbers`; on a quiet machine: the record gives the load average
tour-record: $(STAMP)
	$(BIN)/python scripts/tour.py

# mamba-ssm as an external oracle for the SSM tests (and peft for the adapter tests): its torch references and Triton kernels,
# without its CUDA extension (which does not build on a CPU machine). If an oracle cannot be
# installed, this target fails (the check below) and `make test` with it: a plain `pytest` skips
# those tests instead. GPU users install the real kernels with `pip install -e '.[cuda]'`.
$(ORACLE): $(STAMP)
	# mamba-ssm's torch references and Triton kernels, and flash-linear-attention, whose
	# fla/ops/*/naive.py loops are the oracle of the zoo mixers (tests/mixers/test_zoo_*.py):
	# --no-deps, so they pull no torch; exact versions in $(NODEPS)
	-MAMBA_FORCE_BUILD=TRUE MAMBA_SKIP_CUDA_BUILD=TRUE $(BIN)/python -m pip install --quiet \
		--no-build-isolation --no-deps -r $(NODEPS)
	# the extras the suite tests against: peft (oracle of the LoRA/HyLoRA adapters), [bench]'s
	# HF peers, [ray] and [tracking] (the Ray-engine and tracker tests), [interop] (pandas and HF
	# datasets read the dataset shards) and [docs] (tests/test_docs.py builds the site); none
	# pulls torch, and the lock fixes their versions
	-$(BIN)/python -m pip install --quiet --no-build-isolation $(PIN) \
		-e '.[dev,bench,docs,ray,tracking,interop,peft]' einops
	# the test oracles must be there (their tests would skip): a failed install fails here
	$(BIN)/python -c "import importlib.util as u, sys; \
	missing = [m for m in ('mamba_ssm', 'einops', 'fla', 'peft') if u.find_spec(m) is None]; \
	sys.exit('test oracles not installed: ' + ', '.join(missing) if missing else 0)"
	touch $(ORACLE)

# TEST_WORKERS: pytest-xdist processes (one torch thread each, tests/conftest.py). Two fill the
# 2-core CI machine: the suite took 655 s on one and 399 s on two (docs/performance.md has the
# measurement); `TEST_WORKERS=auto` takes one per core elsewhere, `TEST_WORKERS=0` runs in-process.
TEST_WORKERS ?= 2
# RECALL_LAB_REQUIRE_ORACLES=1: a test skipped for a missing oracle fails (tests/conftest.py),
# and the summary says how many oracle tests ran
test: $(ORACLE)
	RECALL_LAB_REQUIRE_ORACLES=1 RECALL_LAB_LOCKED=$(if $(LOCK),1,0) $(BIN)/python -m pytest -q \
		-n $(TEST_WORKERS)

# the quick tier: no slow-marked test, no test measured at 1 s or more (tests/heavy.txt) and no
# test of an oracle that `make test` installs; the README gives its measured time
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m "not slow and not heavy"

# on a quiet machine: the whole suite and then the quick tier, timed (JUnit XML in runs/), into
# tests/heavy.txt (the tests >= 1 s) and docs/results/tests/record.json (both tiers' wall times,
# which `make readme-numbers` puts in the README)
test-tiers: $(ORACLE)
	mkdir -p runs
	RECALL_LAB_REQUIRE_ORACLES=1 RECALL_LAB_LOCKED=$(if $(LOCK),1,0) $(BIN)/python -m pytest -q \
		-n $(TEST_WORKERS) --junitxml=runs/test-tiers.xml || true
	$(BIN)/python scripts/test_tiers.py runs/test-tiers.xml --load "$$(cut -d' ' -f1-3 /proc/loadavg)"
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m "not slow and not heavy" \
		--junitxml=runs/test-fast.xml || true
	$(BIN)/python scripts/test_tiers.py runs/test-tiers.xml --fast runs/test-fast.xml \
		--load "$$(cut -d' ' -f1-3 /proc/loadavg)"

# the suite on today's releases, unlocked, in its own .venv-latest: run it on purpose to find an
# upstream release that breaks the suite before a newcomer does (then fix, and `make lock`)
test-latest:
	$(MAKE) test VENV=.venv-latest LOCK=

# the command line's fuzzer (tests/test_fuzz_cli.py) with a larger budget than the suite's: its
# table of every option and TOML field as always, and FUZZ_EXAMPLES random cases per Hypothesis
# test (the suite draws 40, derandomized; here they are fresh each time)
FUZZ_EXAMPLES ?= 1000
fuzz: $(STAMP)
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_fuzz_cli.py

# the [bench] extra: the peers the benches compare against (torch is installed first, so pip
# keeps it); a bench whose peer could not be installed says so
bench: $(STAMP)
	-$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/recall-lab bench --json runs/bench-$$(date -u +%Y%m%d-%H%M%S).json

# the documentation site, offline, into site/; strict: a broken link or a page missing from the
# nav fails the build
$(DOCS): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	touch $(DOCS)

docs: $(DOCS)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

# On a CUDA machine with a registry: the [cuda] extra (mamba-ssm's kernels, built against the
# torch already in .venv; pick a CUDA torch with TORCH_SPEC), then scripts/gpu-check.sh: the
# CUDA-marked tests and the benches on the device, each part within its time budget, JSON and a
# one-screen summary in GPU_OUT (default runs/gpu-check-<UTC time>; recall_lab/bench/gpu_check.py).
# The stdlib-only preflight comes first, so a machine without a GPU stops with one line before
# anything is installed. OFFLINE=1: a GPU machine without a registry (docs/gpu.md): no venv, no
# install; the Python that has torch (PYTHON) and the wheels carried in .whl/ (make gpu-wheels).
GPU_OUT ?=
gpu-check:
ifeq ($(OFFLINE),1)
	PYTHON=$(PYTHON) bash scripts/gpu-check.sh $(if $(GPU_OUT),--out $(GPU_OUT))
else
	@$(PYTHON) -m recall_lab.bench.gpu_check preflight
	$(MAKE) $(STAMP)
	$(BIN)/python -m pip install --quiet --no-build-isolation -e '.[dev,bench,cuda]'
	PYTHON=$(BIN)/python bash scripts/gpu-check.sh --no-wheels $(if $(GPU_OUT),--out $(GPU_OUT))
endif

# here, with a registry: the wheels the offline GPU machine lacks (scripts/gpu-wheels.txt:
# pydantic, and FLA's kernels as fla-core) into the git-ignored .whl/, which travels with the
# working tree, installed there with --no-deps; prints their total size
gpu-wheels:
	bash scripts/gpu-wheels.sh

# here, without a GPU: the offline check as the GPU machine runs it, on torch 2.11 with only the
# carried wheels and the network cut, up to the first CUDA call (scripts/gpu-dryrun.sh)
gpu-check-dryrun:
	@ls .whl/*.whl >/dev/null 2>&1 || $(MAKE) gpu-wheels
	bash scripts/gpu-dryrun.sh

# here, without a GPU: the whole GPU campaign (scripts/gpu-campaign.sh) offline on the CPU with
# tiny budgets and the network cut, every piece writing a finished record (docs/gpu.md, "The
# campaign"); on the stand-in Python of gpu-check-dryrun where it was made, else on .venv's
# (DRYRUN_IMAGE names another). It needs .venv either way (the fallback Python, and the
# dry run's own tools), so it bootstraps it on a fresh clone like every other target.
gpu-campaign-dryrun: $(STAMP)
	DRYRUN_IMAGE=$${DRYRUN_IMAGE:-$$(ls -d $${RECALL_LAB_CACHE:-$$HOME/.cache/recall-lab}/gpu-dryrun/py312-*/.complete >/dev/null 2>&1 || echo $(BIN)/python)} \
		bash scripts/gpu-dryrun.sh --campaign

lint: $(STAMP)
	$(BIN)/ruff check .

clean-venv:
	rm -rf $(VENV)

# docs/results/leaderboard.md (and .json): every family at equal state, generated from the
# placements' record.json files (scripts/placement_records.py writes them from the run records)
# and the zoo-frontier archive (tests/experiments/test_leaderboard.py)
.PHONY: leaderboard
leaderboard: $(STAMP)
	$(BIN)/python scripts/placement_records.py
	$(BIN)/python scripts/leaderboard.py
