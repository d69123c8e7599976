package mountwatch

import (
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// cleanPath is the PATH of a command run for a caller.
const cleanPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// passedEnv are the daemon's variables a caller's command still gets, when set: locale
// and time zone, nothing that could carry the daemon's own secrets or settings.
var passedEnv = []string{"LANG", "LC_ALL", "LC_CTYPE", "TZ"}

// cleanEnv is the whole environment of a command run for a caller (docs/api.md): PATH
// fixed to cleanPath; HOME, USER and LOGNAME of the uid it runs as (from the user
// database; HOME=/ when the uid has no entry); LANG, LC_ALL, LC_CTYPE and TZ as the
// daemon has them. cred nil is root.
func cleanEnv(cred *syscall.Credential) []string {
	uid := uint32(0)
	if cred != nil {
		uid = cred.Uid
	}
	env := []string{"PATH=" + cleanPath}
	home, name := "/", strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
		if u.HomeDir != "" {
			home = u.HomeDir
		}
	}
	env = append(env, "HOME="+home, "USER="+name, "LOGNAME="+name)
	for _, k := range passedEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}
