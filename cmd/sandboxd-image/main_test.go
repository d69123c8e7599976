package main

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// TestImage builds the image from a static binary into a temp dir, as `make image` does,
// and reads it back as a runtime would: the layout's index names the versioned tag, the
// config has the entrypoint, user and env the DaemonSet relies on, and the layer's
// /usr/bin/sandboxd is the binary (extracted and run: `version` prints the build's version).
// The kustomization it pinned names that same tag for the image the DaemonSets use.
func TestImage(t *testing.T) {
	dir := t.TempDir()
	const version = "v0.0.0-test-1-gabc1234"
	bin := filepath.Join(dir, "sandboxd")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-X main.version="+version, "-o", bin, "../sandboxd")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	kust := filepath.Join(dir, "kustomization.yaml")
	orig, err := os.ReadFile("../../packaging/kubernetes/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kust, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "layout")
	tb := filepath.Join(dir, "image.tar")
	ref, err := build(options{binary: bin, version: version, out: out, tarballPath: tb, kustomization: kust, arch: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	if want := Repository + ":" + version; ref.String() != want {
		t.Fatalf("ref %s, want %s", ref, want)
	}

	p, err := layout.FromPath(out)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index holds %d manifests, want 1", len(im.Manifests))
	}
	d := im.Manifests[0]
	if got := d.Annotations["org.opencontainers.image.ref.name"]; got != version {
		t.Errorf("index ref.name %q, want %q", got, version)
	}
	if got := d.Annotations["io.containerd.image.name"]; got != ref.String() {
		t.Errorf("index io.containerd.image.name %q, want %q", got, ref)
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if !slices.Equal(c.Entrypoint, []string{"/usr/bin/sandboxd"}) || !slices.Equal(c.Cmd, []string{"serve", "--config", "/etc/sandboxd/sandboxd.toml"}) {
		t.Errorf("entrypoint %q cmd %q", c.Entrypoint, c.Cmd)
	}
	if c.User != "0:0" {
		t.Errorf("user %q, want 0:0 (the DaemonSet runs privileged as root)", c.User)
	}
	if !slices.Contains(c.Env, "SANDBOXD_SOCKET=/run/sandboxd/sandboxd.sock") || !slices.ContainsFunc(c.Env, func(e string) bool { return strings.HasPrefix(e, "PATH=") }) {
		t.Errorf("env %q", c.Env)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || c.Labels["org.opencontainers.image.version"] != version {
		t.Errorf("os/arch %s/%s labels %v", cf.OS, cf.Architecture, c.Labels)
	}

	// The files, from the layer as the runtime unpacks it.
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	var binary []byte
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimSuffix(h.Name, "/")] = h
		if h.Name == "usr/bin/sandboxd" {
			if binary, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, mode := range map[string]int64{"usr/bin/sandboxd": 0o755, "etc/sandboxd/sandboxd.toml": 0o644, "etc/passwd": 0o644,
		"run/sandboxd": 0o755, "var/lib/sandboxd": 0o700, "tmp": 0o1777, "var/lib/prometheus/node-exporter": 0o755} {
		if h := files[name]; h == nil {
			t.Errorf("image lacks /%s", name)
		} else if h.Mode != mode || h.Uid != 0 {
			t.Errorf("/%s: mode %o uid %d, want %o uid 0", name, h.Mode, h.Uid, mode)
		}
	}
	extracted := filepath.Join(dir, "extracted-sandboxd")
	if err := os.WriteFile(extracted, binary, 0o755); err != nil {
		t.Fatal(err)
	}
	if o, err := exec.Command(extracted, "version").CombinedOutput(); err != nil || !strings.Contains(string(o), "sandboxd "+version+" ") {
		t.Errorf("/usr/bin/sandboxd version: %v\n%s", err, o)
	}

	// The tarball holds the same image under the same tag.
	timg, err := tarball.ImageFromPath(tb, &ref)
	if err != nil {
		t.Fatal(err)
	}
	if c1, c2 := configName(t, timg), configName(t, img); c1 != c2 {
		t.Errorf("tarball image config %s, layout image config %s", c1, c2)
	}

	// The manifests and the built tag agree: the DaemonSets name Repository without a tag,
	// and the pinned kustomization gives it the tag just built.
	for _, f := range []string{"daemonset.yaml", "daemonset-observe.yaml"} {
		b, err := os.ReadFile(filepath.Join("../../packaging/kubernetes", f))
		if err != nil {
			t.Fatal(err)
		}
		var ds appsv1.DaemonSet
		if err := yaml.Unmarshal(b, &ds); err != nil {
			t.Fatal(err)
		}
		for _, c := range append(ds.Spec.Template.Spec.InitContainers, ds.Spec.Template.Spec.Containers...) {
			if c.Image != Repository {
				t.Errorf("%s: container %s image %q, want %q (the tag comes from kustomization.yaml)", f, c.Name, c.Image, Repository)
			}
		}
	}
	var k struct {
		Images []struct{ Name, NewTag string } `json:"images"`
	}
	for _, kf := range []string{kust, "../../packaging/kubernetes/kustomization.yaml"} {
		b, err := os.ReadFile(kf)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, &k); err != nil {
			t.Fatal(err)
		}
		if len(k.Images) != 1 || k.Images[0].Name != Repository || k.Images[0].NewTag == "" || k.Images[0].NewTag == "latest" {
			t.Errorf("%s: images %+v, want one entry for %s with a version tag", kf, k.Images, Repository)
		}
	}
	if len(k.Images) != 1 {
		t.FailNow()
	}
	committed := k.Images[0].NewTag
	b, _ := os.ReadFile(kust)
	if err := yaml.Unmarshal(b, &k); err != nil || k.Images[0].NewTag != version {
		t.Errorf("pinned kustomization: images %+v, want newTag %s (%v)", k.Images, version, err)
	}
	if want := bytes.Replace(orig, []byte(`"`+committed+`"`), []byte(`"`+version+`"`), 1); !bytes.Equal(b, want) {
		t.Errorf("pinning changed more than the tag:\n%s", b)
	}
}

// configName is the config's digest: the tarball's manifest is Docker's format, the
// config (and so the image's content) is the same.
func configName(t *testing.T, img v1.Image) string {
	t.Helper()
	h, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}
