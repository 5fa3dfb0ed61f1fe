# breakglass: build, test, rehearse. See README.md.
GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
KUBE_BIN := $(CURDIR)/.cache/kube-apiserver

.PHONY: all build test test-short rehearse kube-apiserver bench fuzz lint clean docs

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/breakglass ./cmd/breakglass

# The lab's real kube-apiserver binaries (v1.32.13, v1.34.4), built from the
# Go module proxy once and cached under .cache/ (rebuilt when lab/kubeapiserver changes).
kube-apiserver:
	lab/scripts/build-kube-apiserver.sh

# Everything, end-to-end included: what CI runs.
test: kube-apiserver
	BREAKGLASS_KUBE_BIN_DIR=$(KUBE_BIN) $(GO) test -count=1 -timeout 45m ./...

# Unit tests only (no kube-apiserver needed).
test-short:
	$(GO) test -short -count=1 ./...

# The main job: reproduce the incident on the lab and recover from it.
rehearse: build kube-apiserver
	BREAKGLASS_KUBE_BIN_DIR=$(KUBE_BIN) bin/breakglass lab rehearse

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

lint:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)

# The command reference, generated from the CLI definition (a test checks it is current).
docs:
	$(GO) run ./cmd/breakglass docs docs/commands.md

clean:
	rm -rf bin
