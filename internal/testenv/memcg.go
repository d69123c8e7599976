package testenv

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// MemoryLimited makes a memory cgroup limited to limit bytes, unique to t, beneath this
// process's own memory cgroup (the v1 memory controller where the host mounts it, else
// cgroup2's memory.max), and answers the argv prefix that runs a command inside it: a
// daemon fed hostile input then fails the test, not the machine (the kit's memcg script,
// as a helper). When t ends every process left in it is killed and the cgroup removed.
func MemoryLimited(t testing.TB, limit int64) []string {
	t.Helper()
	RequireRoot(t)
	name := "sandboxd-test-" + unsafeCgroupName.ReplaceAllString(t.Name(), "_") + "-" + strconv.Itoa(os.Getpid())
	var dir, file string
	if own, ok := ownCgroup("memory"); ok && isDir("/sys/fs/cgroup/memory") {
		dir, file = filepath.Join("/sys/fs/cgroup/memory", own, name), "memory.limit_in_bytes"
	} else {
		root := CgroupRoot(t) // cgroup2: memory.max; removed by CgroupRoot's cleanup
		dir, file = root, "memory.max"
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		Unavailable(t, "memory cgroup %s: %v", dir, err)
	}
	t.Cleanup(func() {
		for try := 0; try < 200; try++ {
			b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			// by path: the test's own cgroup on cgroup2, which has no symlinks and no renames.
			if err := syscall.Rmdir(dir); err == nil || os.IsNotExist(err) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("cleanup: memory cgroup %s left behind", dir)
	})
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		Unavailable(t, "limit memory cgroup %s: %v", dir, err)
	}
	return []string{"/bin/sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, dir}
}

// ownCgroup is this process's cgroup in the v1 hierarchy of controller.
func ownCgroup(controller string) (string, bool) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) == 3 && parts[1] == controller {
			return parts[2], true
		}
	}
	return "", false
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
