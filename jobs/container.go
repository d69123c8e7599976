package jobs

import (
	"fmt"
	"os"
	"path/filepath"
)

// initialCgroupNS is the inode of the host's initial cgroup namespace
// (PROC_CGROUP_INIT_INO, include/linux/proc_ns.h): readlink /proc/self/ns/cgroup names it
// as cgroup:[4026531835].
const initialCgroupNS = "cgroup:[4026531835]"

// inContainerCgroup says why the default cgroup root would lie inside a container's own
// cgroup, or "" when it would not (issue 25): a process at the root ("/") of a cgroup
// namespace that is not the host's runs in a container's cgroup (a Kubernetes pod, a
// docker container), and "<cgroup2 mount>/sandboxd" would then be a child of it: jobs
// would count against the container's limits and die with it on every rollout. A host
// daemon may sit at "/" too (a guest VM's simple init), but in the initial namespace:
// that is why the namespace is checked too.
func inContainerCgroup(procRoot string) string {
	own, err := ownCgroup(procRoot)
	if err != nil || own != "/" {
		return ""
	}
	ns, err := os.Readlink(filepath.Join(procRoot, "self", "ns", "cgroup"))
	if err != nil || ns == initialCgroupNS {
		return ""
	}
	return fmt.Sprintf("sandboxd runs at the root of its own cgroup namespace (%s): a container's cgroup, "+
		"where jobs would count against the container's limits and end with it; set [jobs] cgroup_root "+
		"to a cgroup outside the container (docs/operations.md, Kubernetes)", ns)
}
