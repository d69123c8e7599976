package api

import "time"

// Runtime mounts (CONTRACT §12): mounts registered at run time by a runner, one per
// session, with credentials pushed in, released when their job ends.

// Routes of /v1/mounts.
const (
	RouteMountsList       = "GET /v1/mounts"
	RouteMountsAdd        = "POST /v1/mounts"
	RouteMountGet         = "GET /v1/mounts/{name}"
	RouteMountDelete      = "DELETE /v1/mounts/{name}"
	RouteMountCredentials = "PUT /v1/mounts/{name}/credentials"
)

// FeatureRuntimeMounts is listed in status.features by a daemon that serves /v1/mounts.
const FeatureRuntimeMounts = "runtime_mounts"

// EventMountRegistry is the event kind of registrations and releases (each release step
// is one event too).
const EventMountRegistry = "mount_registry"

// LinkSpec is a symlink, outside the mount, that must point into it.
type LinkSpec struct {
	Path   string `json:"path"`
	Target string `json:"target"`
}

// MountRegistration is the body of POST /v1/mounts: every key of a [[mount]] table, plus
// job, credential_expires_at and unmount. Nil fields take the [[mount]] defaults.
type MountRegistration struct {
	Name               string     `json:"name"`
	Path               string     `json:"path"`
	Required           *bool      `json:"required,omitempty"`
	ProbeInterval      *Duration  `json:"probe_interval,omitempty"`
	ProbeTimeout       *Duration  `json:"probe_timeout,omitempty"`
	Canary             *bool      `json:"canary,omitempty"`
	RemountUnit        string     `json:"remount_unit,omitempty"`
	RemountCommand     []string   `json:"remount_command,omitempty"`
	CredentialFile     string     `json:"credential_file,omitempty"`
	RefreshCommand     []string   `json:"refresh_command,omitempty"`
	RefreshAt          *float64   `json:"refresh_at,omitempty"`
	MaxRemountsPerHour *int       `json:"max_remounts_per_hour,omitempty"`
	RemountTimeout     *Duration  `json:"remount_timeout,omitempty"`
	Links              []LinkSpec `json:"links,omitempty"`
	Guard              *bool      `json:"guard,omitempty"`
	// Job ties the mount to a job (§11): it is released when the job ends.
	Job string `json:"job,omitempty"`
	// CredentialExpiresAt is when the credential the mount runs on expires.
	CredentialExpiresAt *time.Time `json:"credential_expires_at,omitempty"`
	// Unmount: releasing the mount also syncs and unmounts it. Default: true for a
	// job-tied mount, false otherwise.
	Unmount *bool `json:"unmount,omitempty"`
}

// Registrant is the peer that registered a mount (SO_PEERCRED and SO_PEERGROUPS of its
// connection). Unless it is uid 0, the mount's remount and refresh commands and its probes
// run as this uid with these groups, and its links are made and removed with its rights.
type Registrant struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups"`
	// PidNS is the registering process's pid namespace ("pid:[4026531836]"); absent
	// when it could not be read.
	PidNS string `json:"pidns,omitempty"`
}

// CredentialPush is the body of PUT /v1/mounts/{name}/credentials.
type CredentialPush struct {
	ExpiresAt *time.Time `json:"expires_at"`
}

// MountList is the body of GET /v1/mounts.
type MountList struct {
	Mounts        []Mount `json:"mounts"`
	Registered    int     `json:"registered"`
	MaxRegistered int     `json:"max_registered"`
	// MaxRegisteredPerUID is [mounts] max_registered_per_uid: the most one uid other
	// than root may register.
	MaxRegisteredPerUID int `json:"max_registered_per_uid"`
	// Quarantined are saved registrations the daemon refused at start, with why; they
	// are not watched and not tried again (register the mount again once fixed).
	Quarantined []QuarantinedMount `json:"quarantined"`
}

// QuarantinedMount is a saved registration refused at start (GET /v1/mounts).
type QuarantinedMount struct {
	Name          string      `json:"name"`
	Path          string      `json:"path"`
	Job           string      `json:"job,omitempty"`
	RegisteredBy  *Registrant `json:"registered_by,omitempty"`
	Reason        string      `json:"reason"`
	QuarantinedAt time.Time   `json:"quarantined_at"`
}

// ReleaseStep is one step of releasing a mount (links, sync, umount, fusermount3,
// umount_lazy, guard), each also recorded as an event.
type ReleaseStep struct {
	Step   string `json:"step"`
	Result string `json:"result"` // done | failed | skipped | observed
	Detail string `json:"detail,omitempty"`
}

// MountRelease is the answer of DELETE /v1/mounts/{name}.
type MountRelease struct {
	Mount     Mount         `json:"mount"`
	Unmounted bool          `json:"unmounted"`
	Steps     []ReleaseStep `json:"steps"`
	Warnings  []string      `json:"warnings,omitempty"`
}
