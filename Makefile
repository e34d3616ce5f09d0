# The commands a contributor runs. `make help` lists them.
# Each target is one line over scripts/test (the test command, by stage), cargo or scripts/;
# run them from the repository root. What a stage runs is written once, in scripts/test.

CARGO ?= cargo
FUZZ_TARGET ?= engine_mutate
FUZZ_SECONDS ?= 60

.PHONY: help fmt fmt-check clippy doc msrv deny test test-all bench bench-load bench-scale soak \
	soak-test chart-test doc-test fuzz fuzz-build check

help: ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 14

fmt: ## format every crate of the workspace
	$(CARGO) fmt --all

fmt-check: ## fail if anything is not formatted (what CI runs)
	scripts/test fmt

clippy: ## lints, warnings are errors (what CI runs)
	scripts/test clippy

doc: ## cargo doc --no-deps, warnings are errors (what CI runs)
	scripts/test doc

msrv: ## the declared rust-version's toolchain checks every target (what CI runs)
	scripts/test msrv

deny: ## licences, bans and sources of every dependency (cargo-deny; what CI runs)
	scripts/test deny

test: ## cargo test: unit, router, loopback TLS, CLI and fake-API-server tests
	scripts/test cargo

test-all: ## scripts/test: every stage (what CI runs)
	scripts/test

bench: ## engine benchmark (divan): cargo bench --bench engine
	$(CARGO) bench --locked --bench engine

bench-load: ## load benchmark of serve over TLS (wrk, release build, ~1.5 min)
	scripts/measure/bench-load

bench-scale: ## cluster source against the cluster's size (fake API server, release build)
	scripts/measure/bench-scale

soak: ## bounded soak of serve (SOAK_DURATION seconds, default 60)
	scripts/measure/soak

soak-test: ## the 30 s soak CI runs (an ignored test)
	$(CARGO) test --locked --test it robustness_soak:: -- --ignored

chart-test: ## helm lint, helm template + kubernetes-validate, rendered-object checks
	scripts/test chart

doc-test: ## every shell block of the README and docs/, output samples compared
	scripts/test doc-test

fuzz-build: ## type-check the fuzz targets (what CI runs); to run them: make fuzz
	scripts/test fuzz

fuzz: ## run one fuzz target (needs cargo-fuzz): make fuzz FUZZ_TARGET=review_json FUZZ_SECONDS=60
	cd fuzz && $(CARGO) fuzz run -s none $(FUZZ_TARGET) -- -max_total_time=$(FUZZ_SECONDS)

check: ## what to run before pushing: fmt, clippy and cargo test
	scripts/test fmt clippy cargo
