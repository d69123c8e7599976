package config

import (
	_ "embed"
	"fmt"
	"os"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/units"
)

// DefaultPath is where the packaged daemon reads its config.
const DefaultPath = "/etc/sandboxd/sandboxd.toml"

// Version is the only config format version this build reads.
const Version = 1

//go:embed default.toml
var defaultTOML string

// Default returns the embedded default config file, with every key documented. With no
// file the daemon runs on exactly this.
func Default() string { return defaultTOML }

// Config is the whole configuration. The toml tags are the key names of CONTRACT §10;
// schema.go decodes them and a test keeps the tags and the schema in step.
type Config struct {
	Version     int          `toml:"version"`
	Server      Server       `toml:"server"`
	Log         Log          `toml:"log"`
	Metrics     Metrics      `toml:"metrics"`
	Health      Health       `toml:"health"`
	Launch      Launch       `toml:"launch"`
	Filesystems []Filesystem `toml:"filesystem"`
	Sites       []Site       `toml:"site"`
	Reclaim     Reclaim      `toml:"reclaim"`
	Mounts      []Mount      `toml:"mount"`
	// RuntimeMounts is the [mounts] table: limits of mounts registered at run time (v1.1).
	RuntimeMounts RuntimeMounts `toml:"mounts"`
	// Jobs is the [jobs] table: job leases and the dead-man switch (v1.1, CONTRACT §11).
	Jobs Jobs `toml:"jobs"`
}

// Jobs is the [jobs] table (CONTRACT §11).
type Jobs struct {
	CgroupRoot  string        `toml:"cgroup_root"`
	DefaultTTL  time.Duration `toml:"default_ttl"`
	MaxLifetime time.Duration `toml:"max_lifetime"`
	Grace       time.Duration `toml:"grace"`
	UnleasedMax time.Duration `toml:"unleased_max"`
	KeepEnded   time.Duration `toml:"keep_ended"`
	// KeepEndedMax caps the ended jobs kept listed (the oldest go first), v1.2.
	KeepEndedMax int64 `toml:"keep_ended_max"`
	// RegistryDir holds the live job registry, a journal (v1.2, CONTRACT §17): a tmpfs
	// (/run), never a watched filesystem.
	RegistryDir string `toml:"registry_dir"`
	// MaxPerUID bounds the live jobs of one uid other than root (issue 21).
	MaxPerUID int64 `toml:"max_per_uid"`
}

// RuntimeMounts is the [mounts] table (CONTRACT §12).
type RuntimeMounts struct {
	MaxRegistered int64 `toml:"max_registered"`
	// MaxPerUID bounds the registered mounts of one uid other than root (issue 21).
	MaxPerUID int64 `toml:"max_registered_per_uid"`
}

// Server is the [server] table: the API socket and who may change things.
type Server struct {
	Socket      string      `toml:"socket"`
	SocketMode  os.FileMode `toml:"socket_mode"`  // written as an octal string, "0660"
	SocketGroup string      `toml:"socket_group"` // group name or numeric gid; "" = the daemon's group
	Writers     []string    `toml:"writers"`      // "uid:N", "gid:N", "user:NAME", "group:NAME"
	HTTP        string      `toml:"http"`         // loopback host:port, "" = off
	StateDir    string      `toml:"state_dir"`
	Mode        string      `toml:"mode"` // api.ModeEnforce or api.ModeObserve
}

// Log is the [log] table.
type Log struct {
	Level  string `toml:"level"`  // debug | info | warn | error
	Format string `toml:"format"` // text | json
}

// Metrics is the [metrics] table (v1.1): the node_exporter textfile sandboxd writes.
type Metrics struct {
	Textfile         string        `toml:"textfile"` // "" = off
	TextfileInterval time.Duration `toml:"textfile_interval"`
}

// Health is the [health] table.
type Health struct {
	TransitionPeriod time.Duration `toml:"transition_period"`
	SampleInterval   time.Duration `toml:"sample_interval"`
}

// Launch is the [launch] table: what a launch call gets when it does not say.
type Launch struct {
	Deadline   time.Duration `toml:"deadline"`
	NeedBytes  api.Size      `toml:"need_bytes"`
	NeedInodes uint64        `toml:"need_inodes"`
}

// Filesystem is one [[filesystem]] entry: a watched filesystem and its thresholds.
type Filesystem struct {
	Path               string          `toml:"path"`
	ReclaimBelow       units.Threshold `toml:"reclaim_below"` // bytes: size or percent
	ReplaceBelow       units.Threshold `toml:"replace_below"`
	ReclaimBelowInodes units.Threshold `toml:"reclaim_below_inodes"` // inodes: count or percent
	ReplaceBelowInodes units.Threshold `toml:"replace_below_inodes"`
	Reserve            api.Size        `toml:"reserve"`      // 0 disables the reserve file
	ReservePath        string          `toml:"reserve_path"` // "" = chosen by the daemon
	WarnTimeToFull     time.Duration   `toml:"warn_time_to_full"`
	SizeSetting        string          `toml:"size_setting"` // free text: what sizes this disk, named in messages
}

// Site is one [[site]] entry: a launcher's write site and its retention.
type Site struct {
	Name     string        `toml:"name"`
	Path     string        `toml:"path"`
	Owner    string        `toml:"owner"` // "user:NAME" or "uid:N"; "" = root only
	MaxAge   time.Duration `toml:"max_age"`
	MinAge   time.Duration `toml:"min_age"`
	MaxFiles int64         `toml:"max_files"` // 0 = no count limit
	MaxBytes api.Size      `toml:"max_bytes"` // 0 = no size limit
	// DrainRate is how many files per second the background drain deletes; 0 = no limit.
	// Under DiskPressure or InodePressure the drain runs at full speed whatever it says.
	DrainRate int64 `toml:"drain_rate"`
}

// Reclaim is the [reclaim] table: the ladder's policy and its declared caches.
type Reclaim struct {
	AutoCaches     []string        `toml:"auto_caches"` // kinds, see CacheKinds
	Protect        []string        `toml:"protect"`
	MinAge         time.Duration   `toml:"min_age"`
	Headroom       api.Size        `toml:"headroom"`
	HeadroomInodes units.Threshold `toml:"headroom_inodes"` // count or percent
	Cooldown       time.Duration   `toml:"cooldown"`
	MaxRunsPerHour int64           `toml:"max_runs_per_hour"`
	LeadTime       time.Duration   `toml:"lead_time"`
	Offline        bool            `toml:"offline"` // caches only a download refills stop at rung 2
	Caches         []Cache         `toml:"cache"`
}

// Ladder values of a cache: how far reclaim may go in it.
const (
	LadderGC      = "gc"      // only the tool's own garbage collection
	LadderEntries = "entries" // also entries, oldest first
	LadderAll     = "all"     // also the whole cache and the tool's wipe command
)

// Cache is one [[reclaim.cache]] entry: a declared cache root.
type Cache struct {
	Name    string   `toml:"name"`
	Path    string   `toml:"path"`
	Command []string `toml:"command"` // the tool's gc command, argv; empty = none
	Order   int64    `toml:"order"`
	Ladder  string   `toml:"ladder"`
}

// Mount is one [[mount]] entry: a watched FUSE mount and its remediation.
type Mount struct {
	Name               string        `toml:"name"`
	Path               string        `toml:"path"`
	Required           bool          `toml:"required"`
	ProbeInterval      time.Duration `toml:"probe_interval"`
	ProbeTimeout       time.Duration `toml:"probe_timeout"`
	Canary             bool          `toml:"canary"`
	RemountUnit        string        `toml:"remount_unit"`
	RemountCommand     []string      `toml:"remount_command"`
	CredentialFile     string        `toml:"credential_file"`
	RefreshCommand     []string      `toml:"refresh_command"`
	RefreshAt          float64       `toml:"refresh_at"` // fraction of the credential's lifetime, in (0,1)
	MaxRemountsPerHour int64         `toml:"max_remounts_per_hour"`
	// RemountTimeout bounds a remount: the unit's restart or the command's start, then
	// the wait for the first healthy probe of the new mount (issue 23).
	RemountTimeout time.Duration `toml:"remount_timeout"`
	Links          []Link        `toml:"links"`
	Guard          bool          `toml:"guard"`
	// PushUIDs may push this mount's credentials (PUT /v1/mounts/{name}/credentials)
	// besides root and the daemon's uid (issue 21).
	PushUIDs []uint32 `toml:"push_uids"`
}

// Link is a symlink into a mount that the daemon keeps in place.
type Link struct {
	Path   string `toml:"path"`
	Target string `toml:"target"`
}

// CacheKinds lists the kinds of cache that [reclaim] auto_caches may name.
func CacheKinds() []string {
	return []string{"pnpm", "npm", "yarn", "pip", "uv", "go-build", "go-mod", "cargo", "apt"}
}

// Observe reports whether the daemon must change nothing ([server] mode = "observe").
func (c *Config) Observe() bool { return c.Server.Mode == api.ModeObserve }

// LoadOrDefault is the config the daemon runs on: the file at path over the embedded
// default, validated, or with no path ("") the embedded default alone. The daemon's
// start, its reload and the CLI's fallbacks all load it so.
func LoadOrDefault(path string) (*Config, error) {
	if path == "" {
		return Parse([]byte(defaultTOML), "default")
	}
	return Load(path)
}

// Load reads the config file at path over the embedded default and validates it. An
// empty path means no file: the default alone. A missing file is an error that matches
// fs.ErrNotExist, so the caller decides whether that means "use the default".
func Load(path string) (*Config, error) {
	if path == "" {
		return Parse(nil, "")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(data, path)
}

// Parse decodes data (a config file called name, for messages) over the embedded default
// and validates the result. The error is a *ValidationError listing every problem.
func Parse(data []byte, name string) (*Config, error) {
	c, ps, err := decode(data, name)
	if err != nil {
		return nil, err
	}
	validate(c, ps)
	if err := ps.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// Validate checks a config built or changed in code; Parse already does this.
func (c *Config) Validate() error {
	ps := newProblems("", nil)
	validate(c, ps)
	return ps.err()
}
