# sandboxd — build, run, test, bench.
# `make run` starts the daemon in the foreground on its embedded default config with its
# socket under ./.run (creatable without packaging); `make test` runs every test.

GO       ?= go
BIN      := bin/sandboxd
RUN_DIR  ?= $(CURDIR)/.run
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS  := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# staticcheck, pinned: `go run` fetches and caches it on first use, so lint needs nothing
# installed beyond Go; go run caches the build, staticcheck caches its analysis.
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Debian packages the tests drive: promtool (prometheus), fusermount3 (fuse3), chattr
# (e2fsprogs), unshare/nsenter/mount (util-linux), systemd as PID 1 of a namespace,
# node_exporter scraping the textfile (prometheus-node-exporter); `make deb` and its
# tests: dh_* and deb-systemd-helper (debhelper), lintian, gcc (a cgo PIE); python3 for
# the README's JSON examples.
DEB_DEPS := prometheus prometheus-node-exporter debhelper lintian gcc fuse3 e2fsprogs util-linux procps systemd dbus curl python3

.PHONY: all build run test test-clients bench lint fuzz deps clean status docs deb image

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/sandboxd

# ARGS are extra flags for serve: make run ARGS='--mode observe'
run: build
	@mkdir -p $(RUN_DIR)
	@echo "sandboxd: socket $(RUN_DIR)/sandboxd.sock — in another shell:"
	@echo "  export PATH=$(CURDIR)/bin:\$$PATH SANDBOXD_SOCKET=$(RUN_DIR)/sandboxd.sock; sandboxd status"
	$(BIN) serve --socket $(RUN_DIR)/sandboxd.sock --state-dir $(RUN_DIR)/state --registry-dir $(RUN_DIR)/registry $(ARGS)

status: build
	SANDBOXD_SOCKET=$(RUN_DIR)/sandboxd.sock $(BIN) status

# Installs what the tests need on a fresh Debian machine (run as root; CI does).
deps:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		missing=""; for p in $(DEB_DEPS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
		if [ -n "$$missing" ]; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
		fi; \
	else echo "make deps: not root or no apt-get; install $(DEB_DEPS) yourself"; fi

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

# -parallel 8: the daemon package's long waiting tests (t.Parallel, daemon/harness_test.go)
# run side by side instead of two at a time (the default is GOMAXPROCS); no other package
# has parallel tests.
test: deps lint
	$(GO) test -count=1 -parallel 8 -timeout 25m ./...
	$(MAKE) --no-print-directory test-clients

# The runner clients' own tests (clients/python, clients/node), each in its language's
# runner against a real `bin/sandboxd serve`; they install nothing. Root-only cases fail
# under CI=true instead of skipping, as the Go tests do.
test-clients: build
	cd clients/python && SANDBOXD_BIN=$(CURDIR)/$(BIN) python3 -m unittest discover -s tests
	cd clients/node && SANDBOXD_BIN=$(CURDIR)/$(BIN) node --test test/client.test.js

# Short fuzzing of the request decoder and the config loader (seeds run in `make test`).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRequest$$' -fuzztime 30s ./api
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 30s ./internal/config

bench: deps build
	./scripts/bench.sh

clean:
	rm -rf bin $(RUN_DIR)

# Regenerates docs/config.md's reference block and the DaemonSet's ConfigMap
# (packaging/kubernetes/configmap.yaml) from the embedded default.
docs:
	$(GO) test -count=1 -run '^TestConfigMap$$' ./packaging/kubernetes -update >/dev/null
	@awk '/^```toml$$/{print; system("cat internal/config/default.toml"); skip=1; next} skip && /^```$$/{skip=0} !skip' docs/config.md > docs/config.md.new && mv docs/config.md.new docs/config.md

# Regenerates docs/policy.md's table from the fleet simulator (issue 28): 1,000 simulated
# sandboxes × 30 days under each policy, deterministic for its seed.
sim:
	$(GO) run ./cmd/sandboxd-sim -seed 1 -update docs/policy.md

# A lintian-clean Debian package (packaging/debian/build.sh says how) in bin/.
deb:
	bash packaging/debian/build.sh

# The container image, without Docker (no engine needed): a static binary (CGO_ENABLED=0)
# in an OCI image layout (bin/image) and an image tarball (bin/sandboxd-image.tar), tagged
# ghcr.io/sandboxd/sandboxd:$(VERSION); pins packaging/kubernetes/kustomization.yaml to that
# tag. docs/operations.md, "Kubernetes", says how to load and push it.
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)
image:
	CGO_ENABLED=0 GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/sandboxd-static ./cmd/sandboxd
	$(GO) run ./cmd/sandboxd-image -binary bin/sandboxd-static -version $(VERSION) -arch $(IMAGE_ARCH) \
		-out bin/image -tarball bin/sandboxd-image.tar -kustomization packaging/kubernetes/kustomization.yaml
