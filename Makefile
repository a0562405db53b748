# celsched Makefile (kubebuilder habits). `make help` lists the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

GO ?= go
BIN := $(CURDIR)/bin

# Versions come from go.mod files, never from here.
K8S_VERSION := $(shell $(GO) list -m -f '{{.Version}}' k8s.io/kubernetes)
K8S_MINOR := $(word 2,$(subst ., ,$(K8S_VERSION)))
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.0.0-dev)
VERSION_PKG := k8s.io/component-base/version
LDFLAGS := -X $(VERSION_PKG).gitVersion=$(K8S_VERSION) -X $(VERSION_PKG).gitMajor=1 \
	-X $(VERSION_PKG).gitMinor=$(K8S_MINOR) -X github.com/celsched/celsched/cmd/celsched/app.Version=$(VERSION) -X main.celschedVersion=$(VERSION)

CONTROLLER_GEN := $(BIN)/controller-gen
GOLANGCI_LINT := $(BIN)/golangci-lint
BENCHSTAT := $(BIN)/benchstat
HELM := $(BIN)/helm
PROMQL := $(BIN)/promql
CYCLONEDX_GOMOD := $(BIN)/cyclonedx-gomod
# KWOK's controller, at the version hack/tools/kwok pins, in a directory of
# that version with the stages it runs (kwok-stages.yaml, assembled from the
# same module): test/kwok starts it (KWOK=path), `make run` and the tests
# that need pods to run and terminate.
KWOK_VERSION := $(shell cd hack/tools/kwok && $(GO) list -m -f '{{.Version}}' sigs.k8s.io/kwok)
KWOK := $(BIN)/kwok/$(KWOK_VERSION)/kwok
KWOK_STAGES := $(BIN)/kwok/$(KWOK_VERSION)/kwok-stages.yaml
# KWOK's own stages (under kustomize/stage/ in its module), kwokctl's
# default set: nodes initialized Ready and kept so by a Lease; pods Running
# when bound, Succeeded when a Job's, deleted when terminating; plus its
# node-not-ready chaos stage (a node labelled
# node-not-ready.stage.kwok.x-k8s.io=true turns NotReady).
KWOK_STAGE_FILES := node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
	pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml node/chaos/node-not-ready.yaml

# Generated files that `make verify` checks are up to date.
GENERATED := api/v1alpha1/zz_generated.deepcopy.go config/crd config/rbac/role.yaml config/webhook/manifests.yaml charts/celsched/crds charts/celsched/files

# Test flags; e.g. `make test TESTFLAGS='-run TestCRD -v'`.
TESTFLAGS ?=
# How long `make test` runs each fuzz target, and `make fuzz` does.
# make test fuzzes each target for a number of inputs, not a duration: a
# duration's deadline can fail a clean run with "context deadline exceeded"
# (a race in Go 1.26's fuzzing coordinator, golang/go#75804, fixed in Go
# 1.27); make fuzz takes FUZZTIME=2m or FUZZTIME=100000x.
TEST_FUZZTIME ?= 1000x
FUZZTIME ?= 2m
FUZZ_TARGETS ?= FuzzCompile FuzzEvaluate FuzzRememberedIsFresh
BENCHFLAGS ?= -count=5
# The packages whose tests `make test` runs under -race (only there): the
# engine, the plugins, the controllers and the CLI (impact and analyze
# evaluate in parallel), none of which needs envtest.
RACE_PKGS_RE := ^github.com/celsched/celsched/(engine|celplugins|controllers|cmd/celsched|simulate)(/|$$)
# TestRelease (test/release) runs `make release` for this platform. `make
# test` runs it last and alone, with time for a cold build: the release's
# flags (CGO_ENABLED=0, -trimpath) share no build cache with the tests', and
# building the manager and the CLI from cold takes minutes on 2 cores.
RELEASE_PKG := github.com/celsched/celsched/test/release
RELEASE_TEST_TIMEOUT ?= 30m
# `make test-verdict`: the size and seed of TestVerdictIsOne's generated
# cluster (`make test` runs it at 12 nodes and 30 pods, seed 1).
VERDICT_NODES ?= 60
VERDICT_PODS ?= 200
VERDICT_SEED ?= 1
# `make perf`: the node counts to run (1000, 5000, or empty for both), and
# where the runs go (one directory per run: DataItems JSON, the phases'
# CPU and allocations, go test output, logs of failed workloads). A full
# run (both sizes) takes 1.5 to 4 hours on 2 cores, each size 45 minutes
# to 2 hours, as fast or slow as the machine is that day
# (docs/performance.md): go test's timeout is above both.
PERF_NODES ?=
PERF_DIR ?= $(BIN)/perf
PERF_TIMEOUT ?= 6h
# `make perf-upstream`: how many runs of each variant, and more flags of
# BenchmarkPerfSchedulingUpstream (test/performance/upstream_test.go), e.g.
# PERF_UPSTREAM_FLAGS='-upstream-workloads=SchedulingBasic/5000Nodes'.
PERF_UPSTREAM_RUNS ?= 3
PERF_UPSTREAM_FLAGS ?=
# `make release`: the os/arch pairs to build, the directory the release
# goes to (absent or empty), and the modification time of the files in the
# archives (the commit's, so that a commit gives the same archives).
PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
DIST ?= $(CURDIR)/dist
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
# `make run`: kube-scheduler's feature gates for the manager (and the local
# kube-apiserver), e.g. FEATURE_GATES=GenericWorkload=true, and the
# Kubernetes version the manager's scheduler emulates (the local
# kube-apiserver runs at its own), e.g. EMULATED_VERSION=1.36.
FEATURE_GATES ?=
EMULATED_VERSION ?=
GATES_FLAGS := $(if $(EMULATED_VERSION),--emulated-version=$(EMULATED_VERSION)) $(if $(FEATURE_GATES),--feature-gates=$(FEATURE_GATES))

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: run
run: ## Run the manager on a local control plane with sample nodes, policies and pods (or against $$KUBECONFIG / KUBECONFIG=...); FEATURE_GATES=Name=true,... sets kube-scheduler's feature gates, EMULATED_VERSION=1.36 its emulated version.
	@if [ -n "$(KUBECONFIG)" ]; then \
		echo "make run: KUBECONFIG is set: running the celsched manager against $(KUBECONFIG)"; \
		$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/manager ./cmd/manager; \
		exec $(BIN)/manager --kubeconfig "$(KUBECONFIG)" --leader-elect=false --webhook-port=0 --metrics-bind-address 127.0.0.1:8080 --health-probe-bind-address 127.0.0.1:8081 $(GATES_FLAGS); \
	fi; \
	assets=$$(hack/envtest-assets.sh); \
	kwok=$$($(MAKE) -s --no-print-directory kwok); \
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/celsched-local ./hack/local; \
	KUBEBUILDER_ASSETS="$(CURDIR)/$$assets" KWOK="$$kwok" exec $(BIN)/celsched-local $(GATES_FLAGS)

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRD, RBAC and webhook manifests in config/, and copy the CRD and scheduler configuration into charts/celsched.
	$(CONTROLLER_GEN) crd rbac:roleName=celsched-manager webhook paths="./api/..." paths="./controllers/..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac output:webhook:artifacts:config=config/webhook
	rm -f charts/celsched/crds/*.yaml && cp config/crd/bases/*.yaml charts/celsched/crds/
	cp config/scheduler/scheduler-config.yaml charts/celsched/files/

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code for the API types.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths="./api/..."

.PHONY: fmt
fmt: ## Run gofmt on the code.
	gofmt -s -w $$(git ls-files --cached --others --exclude-standard '*.go')

.PHONY: vet
vet: ## Run go vet.
	$(GO) vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint (configuration in .golangci.yml).
	$(GOLANGCI_LINT) run ./...

.PHONY: verify
verify: $(CONTROLLER_GEN) vet lint ## Fail if generated files are stale, or gofmt, vet or lint complain.
	hack/verify-generated.sh $(GENERATED)
	@unformatted=$$(gofmt -s -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt -s would change: $$unformatted (run make fmt)"; exit 1; fi
	@echo "verify: ok"

.PHONY: envtest-assets
envtest-assets: ## Build kube-apiserver and etcd for envtest, and kubectl for the docs' examples, into bin/ (once).
	@hack/envtest-assets.sh >/dev/null

.PHONY: test
test: $(HELM) $(PROMQL) $(KWOK) $(KWOK_STAGES) $(CYCLONEDX_GOMOD) ## Run every test once: the unit and envtest suites against a real kube-apiserver and etcd, the engine, the plugins, the controllers and the CLI under -race, the sample policy suites (TestSampleSuites), a release for this platform (TestRelease), the docs' examples against make run's cluster (TestExamples), and each fuzz target briefly.
	assets=$$(hack/envtest-assets.sh); \
	KUBEBUILDER_ASSETS="$(CURDIR)/$$assets" HELM="$(HELM)" PROMQL="$(PROMQL)" KWOK="$(KWOK)" $(GO) test $(TESTFLAGS) $$($(GO) list ./... | grep -v -E '$(RACE_PKGS_RE)' | grep -v -x '$(RELEASE_PKG)')
	$(GO) test -race $(TESTFLAGS) $$($(GO) list ./... | grep -E '$(RACE_PKGS_RE)')
	$(GO) test -timeout $(RELEASE_TEST_TIMEOUT) $(TESTFLAGS) $(RELEASE_PKG)
	$(MAKE) --no-print-directory fuzz FUZZTIME=$(TEST_FUZZTIME)

.PHONY: test-verdict
test-verdict: ## Run the differential tests TestVerdictIsOne (live scheduler, dry run, rollout gate, analyze, impact) on a larger generated cluster, and TestPreemptionVerdictIsOne (preemption and its victim rules): VERDICT_NODES, VERDICT_PODS, VERDICT_SEED.
	assets=$$(hack/envtest-assets.sh); \
	KUBEBUILDER_ASSETS="$(CURDIR)/$$assets" $(GO) test -count=1 -timeout 30m $(TESTFLAGS) -run '^(TestVerdictIsOne|TestPreemptionVerdictIsOne)$$' ./test/integration \
		-args -verdict.nodes=$(VERDICT_NODES) -verdict.pods=$(VERDICT_PODS) -verdict.seed=$(VERDICT_SEED)

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 2m).
	for target in $(FUZZ_TARGETS); do \
		$(GO) test -run='^$$' -fuzz="^$$target$$" -fuzztime=$(FUZZTIME) ./engine || exit 1; \
	done

.PHONY: bench
bench: $(BENCHSTAT) ## Run the Go benchmarks (-count=5) and print their medians with benchstat.
	$(GO) test -run='^$$' -bench=. -benchmem $(BENCHFLAGS) ./engine/... ./celplugins/... | tee bin/bench.txt
	$(BENCHSTAT) bin/bench.txt

.PHONY: perf
perf: ## Run the scheduler_perf workloads of test/performance at 1000 and 5000 nodes (PERF_NODES=1000 for one size), three runs each, and print per workload the median and spread of pods/s, the ratios to plain stock and to the native rules, CPU and allocations per pod (docs/performance.md).
	@assets=$$(hack/envtest-assets.sh); \
	filter=performance; \
	case "$(PERF_NODES)" in \
	  "") ;; \
	  1000|5000) filter="performance,$(PERF_NODES)Nodes" ;; \
	  *) echo "make perf: PERF_NODES must be 1000, 5000 or empty (both), not $(PERF_NODES)"; exit 2 ;; \
	esac; \
	out="$(PERF_DIR)/$$(date -u +%Y%m%dT%H%M%SZ)"; mkdir -p "$$out/logs"; \
	echo "make perf: workloads labelled $$filter; output in $$out (go test output: $$out/go-test.txt)"; \
	start=$$(date +%s); status=0; \
	PATH="$(CURDIR)/$$assets:$$PATH" ARTIFACTS="$$out/logs" $(GO) test ./test/performance -run '^$$' -bench '^BenchmarkPerfScheduling$$' \
		-benchtime 1x -timeout $(PERF_TIMEOUT) -args -perf-scheduling-label-filter="$$filter" -data-items-dir="$$out" -celsched-phases="$$out/phases.jsonl" \
		> "$$out/go-test.txt" 2>&1 || status=$$?; \
	echo "make perf: go test took $$(( $$(date +%s) - start ))s, exit status $$status"; \
	if [ $$status -ne 0 ]; then grep -E -e '^--- FAIL' -e 'FATAL|ERROR' "$$out/go-test.txt" | head -n 40; fi; \
	$(GO) run ./test/performance/perftable "$$out" && exit $$status

.PHONY: perf-upstream
perf-upstream: ## Run kube-scheduler's own scheduler_perf workloads of test/performance/upstream/suite.yaml, unchanged, with the stock profile and with the celsched profile as default-scheduler (no policies, policies that match none of their pods, sample policies that match them), PERF_UPSTREAM_RUNS=3 runs each, then a profiled run of stock and matching; print per workload and variant the median and spread of pods/s, ratios to stock, CPU and allocations per pod, and the profiles' top entries (docs/performance.md).
	@assets=$$(hack/envtest-assets.sh); \
	out="$(PERF_DIR)/upstream-$$(date -u +%Y%m%dT%H%M%SZ)"; mkdir -p "$$out/logs" "$$out/profiled/logs"; \
	$(GO) test -c -o $(BIN)/perf-upstream.test ./test/performance; \
	echo "make perf-upstream: output in $$out (go test output: $$out/go-test.txt, profiled run: $$out/profiled)"; \
	start=$$(date +%s); status=0; \
	run() { dir=$$1; shift; (cd test/performance && PATH="$(CURDIR)/$$assets:$$PATH" ARTIFACTS="$$dir/logs" $(BIN)/perf-upstream.test \
		-test.run '^$$' -test.bench '^BenchmarkPerfSchedulingUpstream$$' -test.benchtime 1x -test.timeout $(PERF_TIMEOUT) \
		-perf-scheduling-label-filter= -data-items-dir="$$dir" -celsched-phases="$$dir/phases.jsonl" "$$@" $(PERF_UPSTREAM_FLAGS) > "$$dir/go-test.txt" 2>&1); }; \
	run "$$out" -upstream-runs=$(PERF_UPSTREAM_RUNS) || status=$$?; \
	echo "make perf-upstream: the runs took $$(( $$(date +%s) - start ))s, exit status $$status"; \
	run "$$out/profiled" -upstream-runs=1 -upstream-variants=stock,matching -celsched-cpuprofiles="$$out/profiled/pprof" || status=$$?; \
	echo "make perf-upstream: with the profiled run $$(( $$(date +%s) - start ))s, exit status $$status"; \
	if [ $$status -ne 0 ]; then grep -h -E -e '^--- FAIL' -e 'FATAL|ERROR' "$$out/go-test.txt" "$$out/profiled/go-test.txt" | head -n 40; fi; \
	$(GO) run ./test/performance/perftable -upstream "$$out" || status=$$?; \
	for variant in stock matching; do \
		profiles=$$(ls "$$out"/profiled/pprof/*_$${variant}_1_*.pprof 2>/dev/null | grep -v allocs); \
		[ -n "$$profiles" ] || continue; \
		echo; echo "make perf-upstream: CPU profile of the $$variant variant, every workload's measured phase merged: the top by flat time, then celsched's plugins and engine by cumulative time"; \
		$(GO) tool pprof -top -nodecount=20 $$profiles 2>/dev/null | sed -n '/^Duration/p;/flat%/,$$p'; \
		$(GO) tool pprof -top -cum -nodecount=1000 $$profiles 2>/dev/null | grep -E 'github.com/celsched/celsched/(engine|celplugins)' | head -n 15; \
	done; \
	exit $$status

.PHONY: perf-binary
perf-binary: build ## Measure the built manager binary as a process against a local control plane: stock vs celsched pods/s per round (PERF_BINARY_FLAGS, e.g. '-workload RequiredAffinity -profile-pods 3000'; docs/performance.md).
	@assets=$$(hack/envtest-assets.sh); \
	KUBEBUILDER_ASSETS="$(CURDIR)/$$assets" $(GO) run ./hack/perfbinary -manager $(BIN)/manager $(PERF_BINARY_FLAGS)

.PHONY: perf-plot
perf-plot: ## Draw docs/perf-history/ratios.svg, the ratios of every full make perf run, from docs/perf-history/runs.csv (docs/performance.md).
	$(GO) run ./hack/perfplot -in docs/perf-history/runs.csv -out docs/perf-history/ratios.svg

##@ Build

.PHONY: build
build: ## Build the manager and the celsched CLI (also as the kubectl plugin kubectl-celsched) into bin/.
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/manager ./cmd/manager
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/celsched ./cmd/celsched
	ln -sf celsched $(BIN)/kubectl-celsched

.PHONY: release
release: $(HELM) $(CYCLONEDX_GOMOD) ## Build the release VERSION (e.g. v0.1.0) into DIST (dist/): per platform of PLATFORMS the CLI's and the manager's archives, the SBOM, the Helm chart, the install YAML, the krew manifest and checksums.txt (docs/release.md).
	$(GO) run ./hack/release -version "$(VERSION)" -platforms "$(PLATFORMS)" -dist "$(DIST)" -ldflags "$(LDFLAGS) -s -w" \
		-helm "$(HELM)" -cyclonedx-gomod "$(CYCLONEDX_GOMOD)" -mtime "$(SOURCE_DATE_EPOCH)"

.PHONY: update-k8s
update-k8s: ## Re-pin k8s.io/kubernetes and its staging modules (K8S=v1.37.2).
	hack/update-k8s-replaces.sh $(K8S)
	$(GO) mod tidy

##@ Tools (each pinned in its own module under hack/tools/, built into bin/)

$(CONTROLLER_GEN): hack/tools/controller-gen/go.mod
	cd hack/tools/controller-gen && $(GO) build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

$(BENCHSTAT): hack/tools/benchstat/go.mod
	cd hack/tools/benchstat && $(GO) build -o $@ golang.org/x/perf/cmd/benchstat

$(HELM): hack/tools/helm/go.mod
	cd hack/tools/helm && $(GO) build -o $@ helm.sh/helm/v3/cmd/helm

$(CYCLONEDX_GOMOD): hack/tools/cyclonedx-gomod/go.mod
	cd hack/tools/cyclonedx-gomod && $(GO) build -o $@ github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod

# Not a third-party command: Prometheus's rule loader (rulefmt, as promtool
# uses it) and PromQL parser behind a small main of ours; the chart test
# checks the PrometheusRule and the Grafana dashboard with it.
$(PROMQL): hack/tools/promql/go.mod hack/tools/promql/main.go
	cd hack/tools/promql && $(GO) build -o $@ .

.PHONY: kwok
kwok: $(KWOK) $(KWOK_STAGES) ## Build KWOK's controller and its stages into bin/kwok/<version>/ (once) and print the binary's path, for KWOK=<path> go test ./test/...
	@echo $(KWOK)

$(KWOK): hack/tools/kwok/go.mod
	mkdir -p $(@D)
	cd hack/tools/kwok && $(GO) build -o $@.tmp sigs.k8s.io/kwok/cmd/kwok && mv $@.tmp $@

$(KWOK_STAGES): hack/tools/kwok/go.mod
	mkdir -p $(@D)
	cd hack/tools/kwok && $(GO) mod download sigs.k8s.io/kwok && dir=$$($(GO) list -m -f '{{.Dir}}' sigs.k8s.io/kwok) && \
	{ echo "# KWOK $(KWOK_VERSION)'s stages (Makefile: KWOK_STAGE_FILES), from its module's kustomize/stage/."; \
	  for f in $(KWOK_STAGE_FILES); do echo "---"; cat "$$dir/kustomize/stage/$$f"; done; } > $@.tmp && mv $@.tmp $@

$(GOLANGCI_LINT): hack/tools/golangci-lint/go.mod
	cd hack/tools/golangci-lint && $(GO) build -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint
