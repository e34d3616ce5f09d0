# The commands a contributor runs. `make help` lists them.
# Each target is one line over cargo or scripts/; run them from the repository root.

CARGO ?= cargo
FUZZ_TARGET ?= engine_mutate
FUZZ_SECONDS ?= 60

.PHONY: help fmt fmt-check clippy test test-all bench bench-load bench-scale soak soak-test \
	chart-test doc-test fuzz fuzz-build deny check

help: ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 14

fmt: ## format every crate of the workspace
	$(CARGO) fmt --all

fmt-check: ## fail if anything is not formatted (what CI runs)
	$(CARGO) fmt --all -- --check

clippy: ## lints, warnings are errors (what CI runs)
	$(CARGO) clippy --all-targets --locked -- -D warnings

test: ## cargo test: unit, router, loopback TLS, CLI and fake-API-server tests
	$(CARGO) test --locked --all-targets

test-all: ## scripts/test: cargo test, docker context, chart tests, doc tests
	scripts/test

bench: ## engine benchmark (divan): cargo bench --bench engine
	$(CARGO) bench --locked --bench engine

bench-load: ## load benchmark of serve over TLS (wrk, release build, ~1.5 min)
	scripts/bench-load

bench-scale: ## cluster source against the cluster's size (fake API server, release build)
	scripts/bench-scale

soak: ## bounded soak of serve (SOAK_DURATION seconds, default 60)
	scripts/soak

soak-test: ## the 30 s soak CI runs (an ignored test)
	$(CARGO) test --locked --test it robustness_soak:: -- --ignored

chart-test: ## helm lint, helm template + kubernetes-validate, rendered-object checks
	charts/test.sh

doc-test: ## every shell block of the README and docs/, output samples compared
	$(CARGO) build --locked --quiet
	scripts/doc-test target/debug/knative-ha-webhook

fuzz-build: ## build the fuzz targets (needs cargo-fuzz: cargo install cargo-fuzz)
	cd fuzz && $(CARGO) fuzz build -s none

fuzz: ## run one fuzz target: make fuzz FUZZ_TARGET=review_json FUZZ_SECONDS=60
	cd fuzz && $(CARGO) fuzz run -s none $(FUZZ_TARGET) -- -max_total_time=$(FUZZ_SECONDS)

deny: ## licenses, bans and sources of every dependency (needs cargo-deny; not advisories)
	$(CARGO) deny check licenses bans sources

check: fmt-check clippy test ## what to run before pushing
