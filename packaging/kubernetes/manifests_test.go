// Package kubernetes holds sandboxd's DaemonSet manifests (kubectl apply -k); its test
// decodes every manifest strictly into the Kubernetes API types (an unknown or misspelt
// field is an error, as the API server's strict field validation makes it) and runs
// `sandboxd config check` on the ConfigMap's TOML.
package kubernetes

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite configmap.yaml from `sandboxd config default`")

// kustomization is the part of kustomize's Kustomization these manifests use; decoded
// strictly too, so a key kustomize does not know fails here.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	// Images pins the DaemonSets' image to the tag `make image` built (cmd/sandboxd-image
	// rewrites newTag; its test holds the two in agreement).
	Images []struct {
		Name   string `json:"name"`
		NewTag string `json:"newTag"`
	} `json:"images"`
}

func decode(t *testing.T, file string, into any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// The API server's strict decoding: duplicate keys, unknown fields and fields in the
	// wrong case ("hostPid") are errors. encoding/json alone would match case-insensitively.
	j, err := yaml.YAMLToJSONStrict(b)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	strict, err := sigsjson.UnmarshalStrict(j, into, sigsjson.DisallowUnknownFields)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	for _, e := range strict {
		t.Errorf("%s: %v", file, e)
	}
}

// sandboxd builds the CLI once for the test.
func sandboxd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sandboxd")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/sandboxd").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestKustomizationListsEveryManifest(t *testing.T) {
	var k kustomization
	decode(t, "kustomization.yaml", &k)
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" || k.Namespace != "sandboxd" {
		t.Errorf("kustomization: %+v", k)
	}
	files, _ := filepath.Glob("*.yaml")
	files = slices.DeleteFunc(files, func(f string) bool { return f == "kustomization.yaml" })
	slices.Sort(files)
	res := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(files, res) {
		t.Errorf("kustomization resources %v, manifests in the directory %v", res, files)
	}
	var ns corev1.Namespace
	decode(t, "namespace.yaml", &ns)
	var sa corev1.ServiceAccount
	decode(t, "serviceaccount.yaml", &sa)
	if ns.Name != "sandboxd" || sa.Namespace != "sandboxd" || sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("namespace %q, service account %+v", ns.Name, sa.ObjectMeta)
	}
}

// TestConfigMap: the ConfigMap's TOML is `sandboxd config default` with exactly the
// pod's four changes, and `sandboxd config check` accepts it.
func TestConfigMap(t *testing.T) {
	bin := sandboxd(t)
	var cm corev1.ConfigMap
	decode(t, "configmap.yaml", &cm)
	toml, ok := cm.Data["sandboxd.toml"]
	if cm.Kind != "ConfigMap" || cm.Name != "sandboxd-config" || !ok {
		t.Fatalf("configmap: %s %s, keys %v", cm.Kind, cm.Name, cm.Data)
	}
	def, err := exec.Command(bin, "config", "default").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := podConfig(t, string(def))
	if toml != want {
		if *update {
			writeConfigMap(t, want)
			return
		}
		t.Fatalf("configmap.yaml is not `sandboxd config default` with the pod's changes: run `make docs`\n"+
			"(or go test ./packaging/kubernetes -run TestConfigMap -update)\n--- got\n%s\n--- want\n%s", toml, want)
	}
	f := filepath.Join(t.TempDir(), "sandboxd.toml")
	os.WriteFile(f, []byte(toml), 0o644)
	if out, err := exec.Command(bin, "config", "check", f).CombinedOutput(); err != nil {
		t.Fatalf("sandboxd config check on the ConfigMap's TOML: %v\n%s", err, out)
	}
}

// podConfig is the default with the four changes a pod needs (configmap.yaml says why).
func podConfig(t *testing.T, def string) string {
	t.Helper()
	for _, r := range []struct{ old, new string }{
		{`http = ""`, `http = "127.0.0.1:9477"`},
		{`textfile = ""                    #`, `textfile = "/var/lib/prometheus/node-exporter/sandboxd.prom" #`},
		{"[[filesystem]]\n# Any path on the filesystem (required); the filesystem holding it is watched.\npath = \"/\"\n",
			"[[filesystem]]\n# Any path on the filesystem (required); the filesystem holding it is watched.\npath = \"/host\"\n"},
		// The reserve on the writable hostPath made for sandboxd's state (issue 25): by
		// default it resolved to /host/.sandboxd-reserve on the read-only /host mount.
		{`reserve_path = ""                #`, `reserve_path = "/var/lib/sandboxd/reserve" #`},
	} {
		if strings.Count(def, r.old) != 1 {
			t.Fatalf("the default config no longer has exactly one %q: change podConfig and configmap.yaml together", r.old)
		}
		def = strings.Replace(def, r.old, r.new, 1)
	}
	return def
}

func writeConfigMap(t *testing.T, toml string) {
	b, _ := os.ReadFile("configmap.yaml")
	head, _, _ := strings.Cut(string(b), "  sandboxd.toml: |\n")
	var body strings.Builder
	for _, l := range strings.Split(strings.TrimRight(toml, "\n"), "\n") {
		if l != "" {
			body.WriteString("    " + l)
		}
		body.WriteString("\n")
	}
	os.WriteFile("configmap.yaml", []byte(head+"  sandboxd.toml: |\n"+body.String()), 0o644)
	t.Log("configmap.yaml rewritten")
}

// TestDaemonSets: both DaemonSets decode strictly, hold what a node agent that remounts
// needs, and differ only in name, instance label, node affinity and --mode.
func TestDaemonSets(t *testing.T) {
	var enforce, observe appsv1.DaemonSet
	decode(t, "daemonset.yaml", &enforce)
	decode(t, "daemonset-observe.yaml", &observe)
	var cm corev1.ConfigMap
	decode(t, "configmap.yaml", &cm)
	for _, ds := range []*appsv1.DaemonSet{&enforce, &observe} {
		t.Run(ds.Name, func(t *testing.T) { checkDaemonSet(t, ds, &cm) })
	}
	mode := func(ds *appsv1.DaemonSet) (string, corev1.NodeSelectorOperator) {
		args := ds.Spec.Template.Spec.Containers[0].Args
		i := slices.Index(args, "--mode")
		term := ds.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0]
		if i < 0 || i+1 >= len(args) || len(term.MatchExpressions) != 1 || term.MatchExpressions[0].Key != "sandboxd.dev/mode" {
			t.Fatalf("%s: args %v, affinity %+v", ds.Name, args, term)
		}
		return args[i+1], term.MatchExpressions[0].Operator
	}
	if m, op := mode(&enforce); m != "enforce" || op != corev1.NodeSelectorOpIn {
		t.Errorf("sandboxd: --mode %s on %s enforce; want enforce on In", m, op)
	}
	if m, op := mode(&observe); m != "observe" || op != corev1.NodeSelectorOpNotIn {
		t.Errorf("sandboxd-observe: --mode %s on %s enforce; want observe on NotIn (every other node)", m, op)
	}
	// Everything else is the same.
	a, b := enforce.DeepCopy(), observe.DeepCopy()
	for _, ds := range []*appsv1.DaemonSet{a, b} {
		ds.Name = ""
		for _, l := range []map[string]string{ds.Labels, ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels} {
			delete(l, "app.kubernetes.io/instance")
		}
		ds.Spec.Template.Spec.Affinity = nil
		ds.Spec.Template.Spec.Containers[0].Args = nil
	}
	ja, _ := yaml.Marshal(a)
	jb, _ := yaml.Marshal(b)
	if string(ja) != string(jb) {
		t.Errorf("the two DaemonSets differ beyond name, instance, affinity and mode:\n%s\n---\n%s", ja, jb)
	}
	if enforce.Spec.Selector.MatchLabels["app.kubernetes.io/instance"] == observe.Spec.Selector.MatchLabels["app.kubernetes.io/instance"] {
		t.Error("the two DaemonSets share a selector: each would adopt the other's pods")
	}
}

func checkDaemonSet(t *testing.T, ds *appsv1.DaemonSet, cm *corev1.ConfigMap) {
	spec := ds.Spec.Template.Spec
	if ds.Kind != "DaemonSet" || ds.Namespace != "sandboxd" {
		t.Errorf("kind %s namespace %s", ds.Kind, ds.Namespace)
	}
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod template's labels", k, v)
		}
	}
	if !spec.HostPID || !spec.HostNetwork || spec.PriorityClassName != "system-node-critical" {
		t.Errorf("hostPID %v hostNetwork %v priorityClassName %q", spec.HostPID, spec.HostNetwork, spec.PriorityClassName)
	}
	if spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("dnsPolicy %q with hostNetwork", spec.DNSPolicy)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Error("not privileged: Bidirectional mount propagation needs it")
	}
	if c.Args[0] != "serve" || !slices.Contains(c.Args, "/etc/sandboxd/sandboxd.toml") {
		t.Errorf("args %v", c.Args)
	}
	// A ConfigMap edit reaches the daemon (watched file, reloaded in place; daemon's
	// TestWatchConfigFollowsAConfigMap), and a handover waits for the socket
	// (cmd's TestServeWaitsForTheSocket) instead of crash-looping (issue 25).
	for _, f := range []string{"--watch-config", "--wait-for-socket"} {
		if !slices.Contains(c.Args, f) {
			t.Errorf("args %v lack %s", c.Args, f)
		}
	}
	req := c.Resources.Requests
	if req.Cpu().IsZero() || req.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", c.Resources)
	}
	// Probes over the loopback listener the ConfigMap turns on.
	toml := cm.Data["sandboxd.toml"]
	for name, p := range map[string]*corev1.Probe{"/livez": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != name || p.HTTPGet.Host != "127.0.0.1" {
			t.Errorf("probe %s: %+v", name, p)
			continue
		}
		if addr := "127.0.0.1:" + p.HTTPGet.Port.String(); !strings.Contains(toml, `http = "`+addr+`"`) {
			t.Errorf("probe %s goes to %s, which the ConfigMap does not listen on", name, addr)
		}
	}
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			t.Errorf("volumeMount %s has no volume", m.Name)
			continue
		}
		mounts[m.MountPath] = m
		if v.HostPath == nil && v.ConfigMap == nil {
			t.Errorf("volume %s is neither a hostPath nor the ConfigMap", m.Name)
		}
		if v.HostPath != nil && m.MountPath != "/host" && v.HostPath.Path != m.MountPath {
			t.Errorf("hostPath %s mounted at %s: the config's paths are the host's", v.HostPath.Path, m.MountPath)
		}
	}
	if v := vols["config"]; v.ConfigMap == nil || v.ConfigMap.Name != cm.Name || mounts["/etc/sandboxd"].Name != "config" {
		t.Errorf("the config volume is not the ConfigMap %s at /etc/sandboxd", cm.Name)
	}
	for _, p := range []string{"/run/sandboxd", "/var/lib/sandboxd", "/var/lib/prometheus/node-exporter", "/tmp", "/home", "/root", "/mnt"} {
		if _, ok := mounts[p]; !ok {
			t.Errorf("no hostPath at %s", p)
		}
	}
	if m := mounts["/mnt"]; m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationBidirectional {
		t.Error("/mnt (where [[mount]]s live) is not Bidirectional: remounts would not reach the host")
	}
	if m := mounts["/host"]; vols[m.Name].HostPath == nil || vols[m.Name].HostPath.Path != "/" || !strings.Contains(toml, `path = "/host"`) {
		t.Error("the node's / is not mounted at /host, the filesystem the ConfigMap watches")
	}
}
