// Command sandboxd-image builds sandboxd's container image without a container engine
// (`make image`): the static binary (CGO_ENABLED=0) in one layer on an empty base, written
// as an OCI image layout (a directory `ctr images import`, skopeo and crane read) and as an
// image tarball (`ctr images import`, `docker load`, `podman load`), tagged with the
// build's version, never only :latest. It also pins packaging/kubernetes/kustomization.yaml
// to that tag, so `kubectl apply -k` deploys the image just built.
//
//	sandboxd-image -binary bin/sandboxd-static -version v1.2.3 -out bin/image \
//	    -kustomization packaging/kubernetes/kustomization.yaml
//
// It uses github.com/google/go-containerregistry, the library ko and crane build images
// with: it writes OCI layouts and tarballs in process, with no daemon.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/sandboxd/sandboxd/internal/config"
)

// Repository is the image's name; the DaemonSets name it without a tag and the
// kustomization's images: entry pins the tag.
const Repository = "ghcr.io/sandboxd/sandboxd"

// Binary is where the image holds sandboxd.
const Binary = "/usr/bin/sandboxd"

// Entrypoint and Cmd: the DaemonSets override the arguments (args:), the entrypoint stays.
var (
	Entrypoint = []string{Binary}
	Cmd        = []string{"serve", "--config", "/etc/sandboxd/sandboxd.toml"}
	Env        = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SANDBOXD_SOCKET=/run/sandboxd/sandboxd.sock"}
)

// User is root: the DaemonSet runs privileged as uid 0 because sandboxd creates cgroups for
// jobs, opens /dev/fuse and aborts FUSE connections, remounts with propagation to the host,
// and sets chattr +i on its reserve; none of that works as another user.
const User = "0:0"

// epoch: every timestamp in the image, so two builds of one binary are the same image.
var epoch = time.Unix(0, 0).UTC()

type options struct {
	binary, version, out, tarballPath, kustomization, arch string
}

func main() {
	var o options
	flag.StringVar(&o.binary, "binary", "", "the static sandboxd binary (CGO_ENABLED=0)")
	flag.StringVar(&o.version, "version", "", "the version: the image's tag (as git describe prints it)")
	flag.StringVar(&o.out, "out", "bin/image", "the OCI image layout directory to write (replaced)")
	flag.StringVar(&o.tarballPath, "tarball", "", "also write an image tarball here (ctr images import, docker load)")
	flag.StringVar(&o.kustomization, "kustomization", "", "pin this kustomization.yaml's images: entry to the tag")
	flag.StringVar(&o.arch, "arch", runtime.GOARCH, "the binary's architecture")
	flag.Parse()
	ref, err := build(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandboxd-image:", err)
		os.Exit(1)
	}
	fmt.Printf("%s: OCI layout %s", ref, o.out)
	if o.tarballPath != "" {
		fmt.Printf(", tarball %s", o.tarballPath)
	}
	fmt.Println()
}

// build writes the image and returns its reference (repository:version).
func build(o options) (name.Tag, error) {
	if o.binary == "" || o.version == "" {
		return name.Tag{}, errors.New("-binary and -version are required")
	}
	tag, err := name.NewTag(Repository + ":" + o.version)
	if err != nil {
		return name.Tag{}, fmt.Errorf("version %q is not a valid image tag: %w", o.version, err)
	}
	img, err := image(o.binary, o.version, o.arch)
	if err != nil {
		return name.Tag{}, err
	}
	if err := os.RemoveAll(o.out); err != nil { // by path: a build tool's own output dir (-out), as make clean removes bin/
		return name.Tag{}, err
	}
	p, err := layout.Write(o.out, empty.Index)
	if err != nil {
		return name.Tag{}, err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		// The OCI spec's ref.name is the tag (skopeo copy oci:bin/image:TAG); containerd's
		// importers take the whole name from io.containerd.image.name.
		"org.opencontainers.image.ref.name": tag.TagStr(),
		"io.containerd.image.name":          tag.String(),
	})); err != nil {
		return name.Tag{}, err
	}
	if o.tarballPath != "" {
		if err := tarball.WriteToFile(o.tarballPath, tag, img); err != nil {
			return name.Tag{}, err
		}
	}
	if o.kustomization != "" {
		if err := pin(o.kustomization, o.version); err != nil {
			return name.Tag{}, err
		}
	}
	return tag, nil
}

func image(binary, version, arch string) (v1.Image, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	files, err := rootfs(bin)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(files)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: epoch}, CreatedBy: "sandboxd-image " + version, Comment: "sandboxd, static",
	}})
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.Env = Entrypoint, Cmd, Env
	cf.Config.User = User
	cf.Config.WorkingDir = "/"
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":   "sandboxd",
		"org.opencontainers.image.version": version,
		"org.opencontainers.image.source":  "https://github.com/sandboxd/sandboxd",
	}
	return mutate.ConfigFile(img, cf)
}

// rootfs is the layer: the binary, the default config at the path the DaemonSet mounts its
// ConfigMap over (so the image also runs alone), the directories sandboxd writes, and a
// passwd/group naming root and nobody (uid 65534: jobs and probes run as it where asked).
func rootfs(bin []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(p string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: mode, ModTime: epoch, Format: tar.FormatPAX})
	}
	file := func(p string, mode int64, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: mode, Size: int64(len(b)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	for _, d := range []struct {
		p    string
		mode int64
	}{{"etc", 0o755}, {"etc/sandboxd", 0o755}, {"usr", 0o755}, {"usr/bin", 0o755},
		{"run", 0o755}, {"run/sandboxd", 0o755}, {"tmp", 0o1777}, {"var", 0o755}, {"var/lib", 0o755},
		{"var/lib/sandboxd", 0o700}, {"var/lib/prometheus", 0o755}, {"var/lib/prometheus/node-exporter", 0o755}} {
		if err := dir(d.p, d.mode); err != nil {
			return nil, err
		}
	}
	for _, f := range []struct {
		p    string
		mode int64
		b    []byte
	}{
		{"usr/bin/sandboxd", 0o755, bin},
		{"etc/sandboxd/sandboxd.toml", 0o644, []byte(config.Default())},
		{"etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n")},
		{"etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n")},
	} {
		if err := file(f.p, f.mode, f.b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// newTag is the kustomization's images: entry for Repository.
var newTag = regexp.MustCompile(`(?m)^(\s*-\s*name:\s*` + regexp.QuoteMeta(Repository) + `[ \t]*\n[ \t]*newTag:[ \t]*)\S+[ \t]*$`)

// pin rewrites the kustomization's newTag for Repository to version.
func pin(path, version string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !newTag.Match(b) {
		return fmt.Errorf("%s: no images: entry \"- name: %s\" followed by \"newTag:\"", path, Repository)
	}
	b = newTag.ReplaceAll(b, []byte("${1}"+quoteTag(version)))
	tmp := filepath.Join(filepath.Dir(path), ".kustomization.yaml.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path) // by path: a source file in the build's own tree, replaced atomically
}

// quoteTag quotes the tag for YAML: a tag such as 1.10 or 0e5 would otherwise be a number.
func quoteTag(v string) string { return `"` + v + `"` }
