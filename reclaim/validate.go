package reclaim

import (
	"fmt"
	"path/filepath"
)

// ValidateCacheRoots checks declared cache roots against the protect list and the mount
// points (from mountinfo, optional): a root that is relative, equal to or containing a
// protected path, or containing a mount point it would have to cross is an error naming
// the key. The ladder never crosses a mount anyway; config check says so up front.
func ValidateCacheRoots(caches []CacheConfig, protect []string, mountpoints ...string) []error {
	var errs []error
	seen := map[string]bool{}
	for i, c := range caches {
		key := fmt.Sprintf("reclaim.cache[%d].path", i)
		if c.Name != "" {
			if seen[c.Name] {
				errs = append(errs, fmt.Errorf("reclaim.cache[%d].name: %q is used twice", i, c.Name))
			}
			seen[c.Name] = true
		}
		if !filepath.IsAbs(c.Path) {
			errs = append(errs, fmt.Errorf("%s: %q is not an absolute path", key, c.Path))
			continue
		}
		if filepath.Clean(c.Path) == "/" {
			errs = append(errs, fmt.Errorf("%s: the root directory cannot be a cache", key))
			continue
		}
		for _, p := range protect {
			if within(p, c.Path) {
				errs = append(errs, fmt.Errorf("%s: %s is or contains the protected path %s (reclaim.protect)", key, c.Path, p))
			}
		}
		for _, m := range mountpoints {
			if m != filepath.Clean(c.Path) && within(m, c.Path) {
				errs = append(errs, fmt.Errorf("%s: %s contains the mount point %s, which reclaim would not cross", key, c.Path, m))
			}
		}
	}
	return errs
}

// MountPoints lists the mount points of <procRoot>/self/mountinfo, octal escapes decoded,
// for ValidateCacheRoots.
func MountPoints(procRoot string) []string { return readMountPoints(procRoot) }
