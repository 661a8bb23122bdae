# metalhub — everything a developer runs. Each target builds what it needs itself.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

GO            ?= go
BIN           := $(CURDIR)/bin
CONTROLLER_GEN = $(BIN)/controller-gen
ENVTEST_ASSETS = $(BIN)/k8s/current
# -parallel: the tests marked parallel mostly wait on BMC timings and passes, not on the cores.
# -p 3: three packages at once; with two, the cores sat a third idle while the envtest packages
# waited on emulated BMCs and passes.
GO_TEST_FLAGS ?= -count=1 -timeout 20m -parallel 8 -p 3
# The longest packages first, so that no long one starts last and runs alone at the end.
TEST_PACKAGES ?= ./test/campaign/ ./internal/controller/metal/ ./internal/controller/delivery/ ./cmd/metalhub/ \
	./internal/controller/firmware/ ./test/migration/ ./internal/dev/ ./test/deploy/ ./internal/dashboard/ ./...
RUN_ARGS      ?=
IMG           ?= metalhub:latest
PROBE_IMG     ?= metalprobe:latest
CONTAINER_TOOL ?= docker

.PHONY: all
all: build

## Tools -------------------------------------------------------------------

.PHONY: tools
tools: ## Build controller-gen, helm, promtool, kube-apiserver, kubectl and etcd into bin/ (once per version).
	hack/tools/build.sh all >/dev/null

.PHONY: controller-gen
controller-gen:
	hack/tools/build.sh controller-gen >/dev/null

.PHONY: helm
helm:
	hack/tools/build.sh helm >/dev/null

.PHONY: promtool
promtool:
	hack/tools/build.sh promtool >/dev/null

# Debian packages tests need: Chromium for the dashboard's browser tests, iproute2 for the
# probe's check against `ip -o link`. Installed once, with apt-get (as root, or through sudo).
.PHONY: test-packages
test-packages:
	@missing=""; [ -x /usr/bin/chromium ] || missing="$$missing chromium"; command -v ip >/dev/null || missing="$$missing iproute2"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages for the tests:$$missing" >&2; \
	  SUDO=""; [ "$$(id -u)" -eq 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

.PHONY: envtest-assets
envtest-assets:
	hack/tools/build.sh envtest >/dev/null

## Code generation ---------------------------------------------------------

.PHONY: generate
generate: controller-gen ## Generate deepcopy functions.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: manifests
manifests: controller-gen ## Generate CRDs, RBAC and the webhook configuration (and copy them into charts/metalhub).
	$(CONTROLLER_GEN) crd rbac:roleName=metalhub-manager webhook \
	  paths=./api/... paths=./internal/manager/... paths=./internal/controller/... paths=./internal/webhook/... \
	  output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac \
	  output:webhook:artifacts:config=config/webhook
	rm -f charts/metalhub/crds/*.yaml
	cp config/crd/bases/*.yaml charts/metalhub/crds/
	cp config/rbac/role.yaml charts/metalhub/files/manager-role.yaml
	cp config/webhook/manifests.yaml charts/metalhub/files/webhook-manifests.yaml

.PHONY: verify
verify: ## Fail when generated files are stale or code is not gofmt'ed.
	hack/verify.sh

## Build, run, test ----------------------------------------------------------

.PHONY: build
build: ## Build the metalhub binary into bin/.
	$(GO) build -o $(BIN)/metalhub ./cmd/metalhub

.PHONY: run
run: build envtest-assets ## Local control plane + emulated fleet + operator.
	$(BIN)/metalhub dev $(RUN_ARGS)

.PHONY: vet
vet:
	$(GO) vet ./...

.PHONY: docker-build
docker-build: ## Build the operator image IMG and the discovery agent image PROBE_IMG.
	$(CONTAINER_TOOL) build --build-arg VERSION=$$(git describe --always --dirty 2>/dev/null || echo dev) -t $(IMG) .
	$(CONTAINER_TOOL) build --target metalprobe -t $(PROBE_IMG) .

.PHONY: docker-build-check
docker-build-check: ## Without a container engine: run the Dockerfile's build stage here and check its binaries.
	hack/docker-build-check.sh

.PHONY: test
test: verify vet envtest-assets helm promtool docker-build-check test-packages ## Verify, vet, build-stage check, unit, envtest and end-to-end tests, the campaign's fixed seeds.
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) test $(GO_TEST_FLAGS) $(TEST_PACKAGES)

# The fault campaign (test/campaign, docs/safety.md). `make test` runs its fixed seeds; this runs
# SEEDS=N seeds (1..N, or from SEED_FROM) or replays SEED=s, and prints the summary last.
SEEDS     ?=
SEED      ?=
SEED_FROM ?=

.PHONY: campaign
campaign: envtest-assets ## Fault campaign: SEEDS=N runs seeds 1..N (SEED_FROM=k starts at k), SEED=s replays one; summary last.
	@summary=$$(mktemp); rc=0; \
	METALHUB_CAMPAIGN_SEEDS="$(SEEDS)" METALHUB_CAMPAIGN_SEED="$(SEED)" METALHUB_CAMPAIGN_SEED_FROM="$(SEED_FROM)" \
	METALHUB_CAMPAIGN_SUMMARY="$$summary" KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) \
	  $(GO) test -count=1 -run '^TestCampaign$$' -v -timeout $$(( $(or $(SEEDS),4) * 3 + 10 ))m ./test/campaign/ || rc=$$?; \
	cat "$$summary"; rm -f "$$summary"; exit $$rc

# The emulated BMCs' latency preset for the benchmarks (fast, typical, slow: docs/scale.md).
.PHONY: bench
bench: METALHUB_BENCH_LATENCY ?= fast
bench: envtest-assets ## Benchmarks (print their figures), the BMCs answering at once (METALHUB_BENCH_LATENCY=fast).
	METALHUB_BENCH_LATENCY=$(METALHUB_BENCH_LATENCY) KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./...

.PHONY: bench-scale
bench-scale: METALHUB_BENCH_LATENCY ?= typical
# A fleet of 10,000 through discovery: more workers and a higher API request rate than the
# defaults (docs/scale.md, knobs).
bench-scale: BENCH_SCALE_MANAGER_ARGS ?= --metal-concurrency 2048 --kube-api-qps 2000 --kube-api-burst 4000
bench-scale: envtest-assets ## The claim benchmark's fleet at 1,000 and 10,000 servers, with its floors, and 10,000 servers through real discovery, the BMCs as typical ones (docs/scale.md).
	METALHUB_BENCH_LATENCY=$(METALHUB_BENCH_LATENCY) METALHUB_BENCH_SCALE=1 KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) test -run '^$$' -bench '^BenchmarkScale$$' -benchtime 1x -timeout 150m ./internal/controller/metal/bench/
	METALHUB_BENCH_LATENCY=$(METALHUB_BENCH_LATENCY) METALHUB_BENCH_SERVERS=10000 METALHUB_BENCH_SYSTEMS_PER_BMC=8 METALHUB_BENCH_STEADY=1m METALHUB_BENCH_MANAGER_ARGS="$(BENCH_SCALE_MANAGER_ARGS)" KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) test -run '^$$' -bench '^BenchmarkFleetToAvailable$$' -benchtime 1x -timeout 150m ./cmd/metalhub/

.PHONY: bench-telemetry
bench-telemetry: envtest-assets ## Claims' latency at 1,000 servers with telemetry off and on every 5s, alternating (docs/scale.md).
	METALHUB_BENCH_TELEMETRY=1 KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) test -run '^$$' -bench '^BenchmarkTelemetryClaims$$' -benchtime 1x -timeout 60m ./internal/controller/metal/bench/

.PHONY: help
help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'
