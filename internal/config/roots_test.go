package config

import (
	"fmt"
	"path"
	"strings"
	"testing"
)

// Every dangerous root is refused as a site and as a cache, with its key, line and the rule; the directories beneath them that sandboxd is
// meant for are not.
func TestDangerousRootsRefused(t *testing.T) {
	const state = "/var/lib/sandboxd"
	for _, c := range []struct {
		path       string
		site, cach string // the rule named in the refusal; "" = allowed
	}{
		{"/", "root directory", "root directory"},
		{"/etc", "is /etc: a system directory", "is /etc: a system directory"},
		{"/etc/ssl", "inside /etc: a system directory", "inside /etc"},
		{"/usr", "is /usr: a system directory", "is /usr"},
		{"/usr/bin", "inside /usr: a system directory", "inside /usr"},
		{"/usr/lib/x86_64-linux-gnu", "inside /usr: a system directory", "inside /usr"},
		{"/usr/share/doc", "inside /usr", "inside /usr"},
		{"/usr/local", "is /usr/local", "is /usr/local"},
		{"/usr/local/bin", "is /usr/local/bin", "is /usr/local/bin"},
		{"/usr/local/sbin/x", "inside /usr/local/sbin", "inside /usr/local/sbin"},
		{"/usr/local/lib", "is /usr/local/lib", "is /usr/local/lib"},
		{"/usr/local/lib64/x", "inside /usr/local/lib64", "inside /usr/local/lib64"},
		{"/usr/local/libexec/x", "inside /usr/local/libexec", "inside /usr/local/libexec"},
		{"/usr/local/etc", "is /usr/local/etc", "is /usr/local/etc"},
		{"/usr/local/cache", "", ""},
		{"/usr/local/ci/work", "", ""},
		{"/usr/localx", "inside /usr", "inside /usr"},
		{"/bin", "is /bin", "is /bin"},
		{"/bin/x", "inside /bin", "inside /bin"},
		{"/sbin/x", "inside /sbin", "inside /sbin"},
		{"/lib", "is /lib", "is /lib"},
		{"/lib/modules", "inside /lib", "inside /lib"},
		{"/lib32", "is /lib32", "is /lib32"},
		{"/lib64/x", "inside /lib64", "inside /lib64"},
		{"/libx32", "is /libx32", "is /libx32"},
		{"/library", "", ""},
		{"/boot/grub", "inside /boot", "inside /boot"},
		{"/proc", "is /proc", "is /proc"},
		{"/proc/1", "inside /proc", "inside /proc"},
		{"/proc/self/root/srv/ci", "inside /proc", "inside /proc"},
		{"/sys/fs", "inside /sys", "inside /sys"},
		{"/sys/fs/cgroup/unified/x", "inside /sys", "inside /sys"},
		{"/dev", "is /dev", "is /dev"},
		{"/dev/shm/..", "is /dev", "is /dev"},
		{"/dev/mqueue", "inside /dev", "inside /dev"},
		{"/dev/shm", "is /dev/shm", "is /dev/shm"},
		{"/dev/shm/ci", "", ""},
		{"/dev/shmx", "inside /dev", "inside /dev"},
		{"/run", "is /run", "is /run"},
		{"/run/systemd/transient", "inside /run/systemd", "inside /run/systemd"},
		{"/run/sandboxd", "is /run/sandboxd", "is /run/sandboxd"},
		{"/run/udev", "is /run/udev", "is /run/udev"},
		{"/run/lock/x", "inside /run/lock", "inside /run/lock"},
		{"/run/user", "is /run/user", "is /run/user"},
		{"/run/user/1000", "runtime directory", "runtime directory"},
		{"/run/user/1000/ci", "", ""},
		{"/run/ci", "", ""},
		{"/var", "is /var", "is /var"},
		{"/var/lib", "is /var/lib", "is /var/lib"},
		{"/var/lib/", "is /var/lib", "is /var/lib"},
		{"/var/lib/ci-cache", "inside /var/lib", "inside /var/lib"},
		{"/var/lib/docker/tmp", "inside /var/lib", "inside /var/lib"},
		{"/var/log", "is /var/log", "is /var/log"},
		{"/var/log/journal", "inside /var/log", "inside /var/log"},
		{"/var/cache/apt/archives", "", ""},
		{"/var/cache/ci", "", ""},
		{"/var/tmp/ci", "", ""},
		{"/home", "is /home", "is /home"},
		{"/home/ci", "home directory", "home directory"},
		{"/home/ci/work", "", ""},
		{"/home/ci/.cache/go-build", "", ""},
		{"/root", "root's home directory", "root's home directory"},
		{"/root/.cache/pip", "", ""},
		{"/srv/pnpm-store", "", ""},
		{"/opt/x", "", ""},
		{"/tmp/ci", "", ""},
		// The state dir, an ancestor of it and anything inside it.
		{"/var/lib/sandboxd", "is the state directory", "is the state directory"},
		{"/srv/state", "is the state directory", "is the state directory"},
		{"/srv", "contains the state directory", "contains the state directory"},
		{"/srv/state/cooldowns", "lies inside the state directory", "lies inside the state directory"},
		{"/srv/statex", "", ""},
	} {
		for _, k := range []struct{ kind, want string }{{"site", c.site}, {"reclaim.cache", c.cach}} {
			sd := state
			if strings.HasPrefix(c.path, "/srv") {
				sd = "/srv/state"
			}
			// No protected paths: this is about the system's directories, not reclaim.protect.
			src := fmt.Sprintf("[server]\nstate_dir = %q\n[reclaim]\nprotect = []\n[[%s]]\nname = \"x\"\npath = %q\n", sd, k.kind, c.path)
			if k.want == "" {
				if _, err := Parse([]byte(src), "t.toml"); err != nil {
					t.Errorf("%s %s: refused, want it allowed: %v", k.kind, c.path, err)
				}
				continue
			}
			ps := problemsOf(t, src)
			key := k.kind + "[0].path"
			var found bool
			for _, pr := range ps {
				found = found || pr.Key == key && pr.Line == 7 && strings.Contains(pr.Msg, k.want) && strings.Contains(pr.Msg, path.Clean(c.path))
			}
			if !found {
				t.Errorf("%s %s: problems %v, want %s on line 7 saying %q", k.kind, c.path, ps, key, k.want)
			}
		}
	}
}
