package mountinfo

import (
	"os"
	"testing"
)

const sample = `22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
36 22 0:45 / /mnt/with\040space rw,nosuid - tmpfs tmp\040fs rw,size=65536k
40 22 0:52 / /mnt/agent rw,nosuid,nodev shared:9 master:2 - fuse.geesefs bucket rw,user_id=1000,group_id=1000,allow_other
41 40 0:53 / /mnt/agent rw - fuse.geesefs bucket2 rw,user_id=0,group_id=0
bogus line
`

func TestParse(t *testing.T) {
	es, err := Parse([]byte(sample))
	if err == nil || len(es) != 4 {
		t.Fatalf("got %d entries, err %v; want 4 and a note of the malformed line", len(es), err)
	}
	if es[1].MountPoint != "/mnt/with space" || es[1].Source != "tmp fs" || es[1].FSType != "tmpfs" {
		t.Errorf("escapes not decoded: %+v", es[1])
	}
	g := es[2]
	if g.MountID != 40 || g.ParentID != 22 || g.Device() != "0:52" || g.SuperOpts["user_id"] != "1000" ||
		g.FSType != "fuse.geesefs" {
		t.Errorf("fuse entry %+v", g)
	}
	if _, ok := g.SuperOpts["allow_other"]; !ok {
		t.Error("flag option lost")
	}
	top, ok := Deepest(es, "/mnt/agent/x/y", nil)
	if !ok || top.MountID != 41 {
		t.Errorf("deepest for a stacked mount: %+v", top)
	}
	if root, _ := Deepest(es, "/srv", nil); root.MountPoint != "/" {
		t.Errorf("deepest for /srv: %+v", root)
	}
	if Under("/mnt/agentx", "/mnt/agent") {
		t.Error("a sibling with a common prefix counted as under")
	}
}

func TestReadSelf(t *testing.T) {
	es, err := Read("/proc")
	if err != nil || len(es) == 0 {
		t.Fatalf("read /proc/self/mountinfo: %d entries, %v", len(es), err)
	}
	if _, ok := Deepest(es, "/", nil); !ok {
		t.Error("no mount holds /")
	}
	if _, err := os.Stat("/proc/self/mountinfo"); err != nil {
		t.Skip(err)
	}
}

func FuzzParseLine(f *testing.F) {
	for _, s := range []string{"22 1 254:0 / / rw - ext4 /dev/vda rw", `1 2 3:4 /a\ /b\1 o - t s x=y,z`, "- - -", "1 2 3:4 a b c - "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		e, ok := ParseLine(line)
		if ok && e.MountPoint == "" {
			t.Fatalf("accepted %q with an empty mount point", line)
		}
		Unescape(line)
	})
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`a\040b`: "a b", `\011\012\134`: "\t\n\\", `trail\04`: `trail\04`,
		`\777`: `\777`, `\08x`: `\08x`, `plain`: "plain",
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
