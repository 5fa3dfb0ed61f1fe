# breakglass: build, test, rehearse. See README.md.
GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
# The commit's date, in UTC, never the clock's: the same commit builds the same bytes.
BUILD_DATE ?= $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null || echo unknown)
LDFLAGS  := -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.buildDate=$(BUILD_DATE)
# As scripts/dist.sh builds the release: grpc without golang.org/x/net/trace (cmd/breakglass/deps_test.go).
TAGS     := grpcnotrace
# The lab's kube-apiserver binaries live in the user's cache, once per machine
# ($BREAKGLASS_KUBE_BIN_DIR, else ${XDG_CACHE_HOME:-~/.cache}/breakglass/kube-apiserver).
KUBE_BIN := $(shell lab/scripts/build-kube-apiserver.sh --print-dir)
# The pair the rehearsal replays (lab.OldVersion -> lab.NewVersion).
REHEARSE_VERSIONS := v1.32.13 v1.34.4

.PHONY: all build build-lab dist test test-all test-short rehearse kube-apiserver kube-apiserver-rehearse talosctl bench fuzz lint clean docs startup

all: build

# Two static binaries (no cgo): bin/breakglass, the on-call tool, and
# bin/breakglass-lab, the lab (real etcd, kube-apiserver, emulated Talos
# nodes), which `breakglass lab ...` runs from beside it or from PATH.
build: build-lab
	CGO_ENABLED=0 $(GO) build -tags $(TAGS) -ldflags "$(LDFLAGS)" -o bin/breakglass ./cmd/breakglass

build-lab:
	CGO_ENABLED=0 $(GO) build -tags $(TAGS) -ldflags "$(LDFLAGS)" -o bin/breakglass-lab ./cmd/breakglass-lab

# The release: breakglass for linux and darwin (amd64, arm64) and breakglass-lab for linux (amd64,
# arm64), static, stripped and reproducible (two builds of a commit give the same bytes), into dist/
# with SHA256SUMS (scripts/dist.sh); each on-call binary at most 42 MB. CI runs it.
dist:
	VERSION=$(VERSION) COMMIT=$(COMMIT) BUILD_DATE=$(BUILD_DATE) scripts/dist.sh dist

# The lab's real kube-apiserver binaries (v1.32.13 to v1.37.2), once per machine into the user's cache: setup-envtest's,
# else the official release (sha512-checked, ~100 MB each), else built from the Go module proxy (one module each
# under lab/kubeapiserver; 7 to 15 minutes each on 2 cores): lab/README.md.
# KUBE_VERSIONS="v1.33.13 v1.34.4" gets just those.
kube-apiserver:
	lab/scripts/build-kube-apiserver.sh $(KUBE_VERSIONS)

# Just the pair the rehearsal uses.
kube-apiserver-rehearse:
	lab/scripts/build-kube-apiserver.sh $(REHEARSE_VERSIONS)

# The real talosctl v1.13.8 the lab's talosctl tests drive the emulated nodes with (lab/talosctl), built
# from the Go module proxy once per machine into the user's cache (rebuilt when its module or Go changes).
talosctl:
	lab/scripts/build-talosctl.sh

# Everything, end-to-end included: what CI runs. The tests start once the rehearsal's pair of
# kube-apiserver binaries is built; the others build beside them, and the few tests that need
# those wait for them (scripts/test.sh). The lab's tests run side by side (lab/README.md); the
# packages one at a time (-p 1): the lab's and the engine's etcd-membership tests each keep both
# cores busy, and side by side they slowed the emulator enough that a real talosctl's reset missed
# the event it waits for (CI, 2026-12-05; the emulator now drains its events longer, too).
test:
	REHEARSE_VERSIONS="$(REHEARSE_VERSIONS)" scripts/test.sh $(GO) test -count=1 -p 1 -timeout 45m ./...

# make test, then the lab replays of the upgrade pairs CI leaves out (README).
test-all: test
	BREAKGLASS_KUBE_BIN_DIR=$(KUBE_BIN) $(GO) test -count=1 -timeout 30m -tags testall -run TestReplayOtherPairs -v ./lab/

# Unit tests only (no kube-apiserver needed).
test-short:
	$(GO) test -short -count=1 ./...

# The main job: reproduce the incident on the lab and recover from it
# (bin/breakglass hands `lab` over to bin/breakglass-lab).
# The two Go builds (breakglass, and the two kube-apiserver minors) run side by side.
rehearse:
	$(MAKE) -j2 build kube-apiserver-rehearse
	BREAKGLASS_KUBE_BIN_DIR=$(KUBE_BIN) bin/breakglass lab rehearse

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

lint:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)

# The command references, generated from the CLI definitions (tests check they are current).
docs:
	$(GO) run ./cmd/breakglass docs docs/commands.md
	$(GO) run ./cmd/breakglass-lab docs docs/breakglass-lab.md

# Size and start-up time (`version`, median of 20 fresh processes) of both binaries.
startup: build
	scripts/startup.sh bin/breakglass bin/breakglass-lab

clean:
	rm -rf bin dist
