//go:build tools

// Package tools pins the project's dependencies in go.mod before every package that
// uses them exists, so parallel work never races on go.mod.
package tools

import (
	_ "github.com/BurntSushi/toml"
	_ "github.com/coreos/go-systemd/v22/activation"
	_ "github.com/coreos/go-systemd/v22/daemon"
	_ "github.com/coreos/go-systemd/v22/dbus"
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/godbus/dbus/v5"
	_ "github.com/hanwen/go-fuse/v2/fs"
	_ "github.com/hanwen/go-fuse/v2/fuse"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/collectors"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/client_golang/prometheus/testutil"
	_ "github.com/prometheus/procfs"
	_ "golang.org/x/sys/unix"
)
