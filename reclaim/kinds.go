package reclaim

import (
	"path/filepath"
	"strings"
)

// kind is one family of caches sandboxd knows: where it lives under a home, what its
// natural unit of deletion is, and which commands its tool offers.
//
//	kind      root(s) under a home                    entry (unit of deletion)                  gc (rung 2)          wipe (rung 4)
//	pnpm      .local/share/pnpm/store, .pnpm-store   a content file v*/files/XX/<hash>          pnpm store prune     -
//	npm       .npm/_cacache                          a content file content-v2/<algo>/XX/YY/*,  npm cache verify     npm cache clean --force
//	                                                 an index bucket index-v5/XX/YY/*
//	yarn      .cache/yarn                            a package dir v*/<pkg>                     -                    yarn cache clean
//	pip       .cache/pip                             an http cache file (http*/…/<hash>),       -                    pip cache purge
//	                                                 a built wheel file (wheels/…)
//	uv        .cache/uv                              a child of a bucket dir (archive-v0/<id>)  uv cache prune       uv cache clean
//	go-build  .cache/go-build                        a file in a 2-hex subdir XX/<hash>-a|d     -                    go clean -cache
//	go-mod    go/pkg/mod                             a <module>@<version> dir, a download       -                    go clean -modcache
//	                                                 file cache/download/…/@v/<version>.*
//	cargo     .cargo/registry/cache                  a .crate file <index>/<crate>.crate        -                    -
//	cargo-src .cargo/registry/src                    an unpacked crate dir <index>/<crate>      -                    -
//	apt       (AptArchives)                          a .deb                                     apt-get autoclean    apt-get clean
//	declared  [[reclaim.cache]] path                 a top-level entry                          its command          -
//
// Commands run only when the tool is installed and idle, as the root's owner, with an
// environment that points the tool at this root and nowhere else.
type kind struct {
	name  string
	roots []string // relative to a home
	// patterns select entries: slash-separated path.Match segments relative to the root;
	// a final "**" means every non-directory below. filesOnly restricts to non-directories.
	patterns  []string
	filesOnly bool
	// modDirs: entries are the first directories whose name holds '@' (Go module cache).
	modDirs      bool
	makeWritable bool
	// download: only a download refills it (a package cache, not a build output), so
	// with [reclaim] offline = true it stops at rung 2 (CONTRACT §6).
	download bool
	tool     string   // the program the commands need
	gc, wipe []string // argv; "{root}" is replaced by the cache root
	env      func(root, home string) []string
}

var kinds = []*kind{
	{name: "pnpm", download: true, roots: []string{".local/share/pnpm/store", ".pnpm-store"}, patterns: []string{"v*/files/*/*"}, filesOnly: true,
		tool: "pnpm", gc: []string{"pnpm", "store", "prune", "--store-dir", "{root}"},
		env: func(root, _ string) []string { return []string{"npm_config_store_dir=" + root} }},
	{name: "npm", download: true, roots: []string{".npm/_cacache"}, patterns: []string{"content-v2/*/*/*/*", "index-v5/*/*/*"}, filesOnly: true,
		tool: "npm", gc: []string{"npm", "cache", "verify"}, wipe: []string{"npm", "cache", "clean", "--force"},
		env: func(root, _ string) []string {
			return []string{"npm_config_cache=" + filepath.Dir(root), "npm_config_update_notifier=false"}
		}},
	{name: "yarn", download: true, roots: []string{".cache/yarn"}, patterns: []string{"v*/*"},
		tool: "yarn", wipe: []string{"yarn", "cache", "clean"},
		env: func(root, _ string) []string { return []string{"YARN_CACHE_FOLDER=" + root} }},
	{name: "pip", download: true, roots: []string{".cache/pip"}, patterns: []string{"http/**", "http-v2/**", "wheels/**"}, filesOnly: true,
		tool: "pip", wipe: []string{"pip", "cache", "purge"},
		env: func(root, _ string) []string {
			return []string{"PIP_CACHE_DIR=" + root, "PIP_DISABLE_PIP_VERSION_CHECK=1"}
		}},
	{name: "uv", download: true, roots: []string{".cache/uv"}, patterns: []string{"*/*"},
		tool: "uv", gc: []string{"uv", "cache", "prune"}, wipe: []string{"uv", "cache", "clean"},
		env: func(root, _ string) []string { return []string{"UV_CACHE_DIR=" + root} }},
	{name: "go-build", roots: []string{".cache/go-build"}, patterns: []string{"[0-9a-f][0-9a-f]/*"}, filesOnly: true,
		tool: "go", wipe: []string{"go", "clean", "-cache"}, env: goEnv("GOCACHE")},
	{name: "go-mod", download: true, roots: []string{"go/pkg/mod"}, patterns: []string{"cache/download/**"}, filesOnly: true, modDirs: true, makeWritable: true,
		tool: "go", wipe: []string{"go", "clean", "-modcache"}, env: goEnv("GOMODCACHE")},
	{name: "cargo", download: true, roots: []string{".cargo/registry/cache"}, patterns: []string{"*/*"}},
	{name: "cargo-src", download: true, roots: []string{".cargo/registry/src"}, patterns: []string{"*/*"}},
	{name: "apt", download: true, patterns: []string{"*.deb"}, filesOnly: true,
		tool: "apt-get", gc: []string{"apt-get", "-o", "Dir::Cache::archives={root}", "autoclean"},
		wipe: []string{"apt-get", "-o", "Dir::Cache::archives={root}", "-o", "Dir::Cache::pkgcache=", "-o", "Dir::Cache::srcpkgcache=", "clean"}},
}

// goEnv points the go command at one cache and keeps it off the network and off any
// toolchain download, so a test cache never makes it touch the machine's real caches.
func goEnv(key string) func(root, home string) []string {
	return func(root, home string) []string {
		return []string{key + "=" + root, "GOTOOLCHAIN=local", "GOPROXY=off", "GOFLAGS=", "GOENV=off", "GOTELEMETRY=off", "GOWORK=off"}
	}
}

// declaredKind is the layout of a declared root without a kind: its top-level entries.
var declaredKind = &kind{name: "declared", patterns: []string{"*"}}

func kindByName(name string) *kind {
	for _, k := range kinds {
		if k.name == name {
			return k
		}
	}
	return nil
}

// expandArgs replaces "{root}" in argv.
func expandArgs(argv []string, root string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a == "{root}" {
			out[i] = root
			continue
		}
		out[i] = strings.ReplaceAll(a, "{root}", root)
	}
	return out
}
