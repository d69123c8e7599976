package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/user"
	"strconv"
	"strings"
)

// Writers resolves [server] writers to the uids and gids allowed to call the mutating
// endpoints (besides uid 0 and the daemon's own uid). Names are looked up now, so a
// user created later needs a reload. Every bad entry is named in the error.
func (c *Config) Writers() (uids, gids []uint32, err error) {
	var errs []error
	for i, w := range c.Server.Writers {
		id, group, err := resolveWriter(w)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("server.writers[%d]: %w", i, err))
		case group:
			gids = append(gids, id)
		default:
			uids = append(uids, id)
		}
	}
	return uids, gids, errors.Join(errs...)
}

// resolveWriter turns "uid:N", "gid:N", "user:NAME" or "group:NAME" into an id.
func resolveWriter(w string) (id uint32, group bool, err error) {
	kind, val, _ := strings.Cut(w, ":")
	switch kind {
	case "uid":
		id, err = parseID(val)
	case "gid":
		id, err = parseID(val)
		group = true
	case "user":
		id, err = lookupUser(val)
	case "group":
		id, err = lookupGroup(val)
		group = true
	default:
		err = fmt.Errorf(`%q: want "uid:N", "gid:N", "user:NAME" or "group:NAME"`, w)
	}
	return id, group, err
}

// OwnerUID resolves the site's owner ("user:NAME" or "uid:N"); set is false when the
// site has none (root only).
func (s Site) OwnerUID() (uid uint32, set bool, err error) {
	if s.Owner == "" {
		return 0, false, nil
	}
	kind, val, _ := strings.Cut(s.Owner, ":")
	switch kind {
	case "uid":
		uid, err = parseID(val)
	case "user":
		uid, err = lookupUser(val)
	default:
		err = fmt.Errorf(`%q: want "user:NAME" or "uid:N"`, s.Owner)
	}
	return uid, err == nil, err
}

// SocketGID resolves [server] socket_group (a group name or a numeric gid); set is false
// when it is empty (the socket keeps the daemon's group).
func (s Server) SocketGID() (gid uint32, set bool, err error) {
	if s.SocketGroup == "" {
		return 0, false, nil
	}
	if strings.Trim(s.SocketGroup, "0123456789") == "" {
		gid, err = parseID(s.SocketGroup)
	} else {
		gid, err = lookupGroup(s.SocketGroup)
	}
	return gid, err == nil, err
}

func parseID(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 1<<32-1 { // (uid_t)-1 means "no change" to the kernel
		return 0, fmt.Errorf("%q is not a numeric id", s)
	}
	return uint32(n), nil
}

func lookupUser(name string) (uint32, error) {
	if name == "" {
		return 0, errors.New("empty user name")
	}
	u, err := user.Lookup(name)
	var unknown user.UnknownUserError
	if errors.As(err, &unknown) {
		return 0, fmt.Errorf("user %q does not exist", name)
	}
	if err != nil {
		return 0, fmt.Errorf("look up user %q: %w", name, err)
	}
	return parseID(u.Uid)
}

func lookupGroup(name string) (uint32, error) {
	if name == "" {
		return 0, errors.New("empty group name")
	}
	g, err := user.LookupGroup(name)
	var unknown user.UnknownGroupError
	if errors.As(err, &unknown) {
		return 0, fmt.Errorf("group %q does not exist", name)
	}
	if err != nil {
		return 0, fmt.Errorf("look up group %q: %w", name, err)
	}
	return parseID(g.Gid)
}

// checkLoopback accepts host:port where host is localhost or a loopback address, so the
// read-only TCP listener is never reachable from another machine.
func checkLoopback(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: want a loopback host:port such as \"127.0.0.1:9477\": %w", addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("%q: want a port number from 1 to 65535", addr)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.Zone() != "" || !ip.Unmap().IsLoopback() {
		return fmt.Errorf("%q is not a loopback address: want 127.0.0.0/8, ::1 or localhost", addr)
	}
	return nil
}
