package retention

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sandboxd/sandboxd/api"
)

// Manager owns every configured write site.
type Manager struct {
	opts Options
	proc *proc
	boot string

	mu     sync.Mutex // guards sites, order, runCtx, cancel, done, wg use
	sites  map[string]*site
	order  []string
	runCtx context.Context
	cancel map[*site]context.CancelFunc
	done   map[*site]chan struct{} // closed when the site's loop (and its drain) returned
	wg     sync.WaitGroup

	saveMu sync.Mutex // serialises writes of the sightings document

	// changes moves with every change a site's status shows (its index, its prune
	// totals, its problem, its running jobs): GET /v1/status keeps its document until it
	// moves. Time alone (oldest_age_seconds, pending_prune) does not move it.
	changes atomic.Uint64
}

// Changes is a counter that moves whenever anything Snapshot shows may have changed,
// other than by the passing of time.
func (m *Manager) Changes() uint64 { return m.changes.Load() }

func (m *Manager) newIndex() *index {
	x := newIndex()
	x.changes = &m.changes
	return x
}

// sightingsDoc is the state document of first sightings, per site and job id.
type sightingsDoc struct {
	BootID string                         `json:"boot_id"`
	Sites  map[string]map[string]sighting `json:"sites"`
}

const sightingsName = "retention-sightings"

// New checks the options and builds a Manager. It touches no site on disk: Run does.
func New(opts Options) (*Manager, error) {
	opts.setDefaults()
	if err := validateSites(opts.Sites); err != nil {
		return nil, fmt.Errorf("retention: %w", err)
	}
	m := &Manager{opts: opts, sites: map[string]*site{}, cancel: map[*site]context.CancelFunc{},
		done: map[*site]chan struct{}{}}
	m.proc = newProc(opts.ProcRoot, opts.CmdlineTimeout)
	m.boot = m.proc.bootID()
	doc := m.loadSightings()
	for _, c := range opts.Sites {
		m.sites[c.Name] = newSite(m, c, doc[c.Name])
		m.order = append(m.order, c.Name)
	}
	return m, nil
}

// loadSightings reads what earlier runs first saw, unless it is from another boot (start
// ticks count from boot, so older ones mean nothing).
func (m *Manager) loadSightings() map[string]map[string]sighting {
	if m.opts.State == nil {
		return nil
	}
	var doc sightingsDoc
	if err := m.opts.State.Load(sightingsName, &doc); err != nil {
		m.opts.Logger.Warn("first-seen pids not loaded; jobs with live pids are kept until seen again", "err", err)
		return nil
	}
	if doc.BootID == "" || doc.BootID != m.boot {
		return nil
	}
	return doc.Sites
}

// saveSightings writes the first sightings when any site changed them.
func (m *Manager) saveSightings(force bool) {
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	sites := m.siteList()
	dirty := force
	doc := sightingsDoc{BootID: m.boot, Sites: map[string]map[string]sighting{}}
	for _, s := range sites {
		s.mu.Lock()
		dirty = dirty || s.sightDirty
		s.sightDirty = false
		doc.Sites[s.name] = maps(s.sightings)
		s.mu.Unlock()
	}
	if !dirty || m.opts.State == nil {
		return
	}
	if err := m.opts.State.Save(sightingsName, doc); err != nil {
		m.opts.Logger.Debug("first-seen pids kept in memory only", "err", err)
	}
}

func maps(in map[string]sighting) map[string]sighting {
	out := make(map[string]sighting, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

func (m *Manager) emit(ev api.Event) {
	if m.opts.Events == nil {
		return
	}
	if ev.Time.IsZero() {
		ev.Time = m.opts.Now()
	}
	m.opts.Events(ev)
}

func (m *Manager) siteList() []*site {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*site, 0, len(m.order))
	for _, n := range m.order {
		out = append(out, m.sites[n])
	}
	return out
}

func (m *Manager) site(name string) (*site, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if name == "" {
		if len(m.order) == 1 {
			return m.sites[m.order[0]], nil
		}
		return nil, fmt.Errorf("%w: no site named and %d are configured", ErrUnknownSite, len(m.order))
	}
	s := m.sites[name]
	if s == nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownSite, name)
	}
	return s, nil
}

// Run watches every site until ctx ends: per site an inotify watcher, the liveness
// refresher, the reconcile loop and one drain worker. It returns nil when ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.runCtx != nil {
		m.mu.Unlock()
		return fmt.Errorf("retention: Run called twice")
	}
	m.runCtx = ctx
	for _, n := range m.order {
		m.startLocked(m.sites[n])
	}
	m.mu.Unlock()
	<-ctx.Done()
	m.wg.Wait()
	m.saveSightings(false)
	m.proc.lockFile.Close() // a manager never run leaves it to the os.File finalizer
	return nil
}

func (m *Manager) startLocked(s *site) {
	ctx, cancel := context.WithCancel(m.runCtx)
	done := make(chan struct{})
	m.cancel[s], m.done[s] = cancel, done
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer close(done)
		s.run(ctx)
	}()
}

// Reconfigure applies a new site list (SIGHUP): new sites start, removed ones stop, and a
// site whose path is unchanged keeps its index, liveness, first sightings, counters and
// drain, with its limits (max_age, min_age, max_*, owner, drain rate) changed in place.
// A site that stops (removed, or its path changed) is waited for before any new site
// starts: its loop and drain have returned and a prune of it in progress has ended, so
// two drains of one directory never overlap (a renamed site keeps its path).
func (m *Manager) Reconfigure(sites []SiteConfig) error {
	if err := validateSites(sites); err != nil {
		return fmt.Errorf("retention: %w", err)
	}
	m.mu.Lock()
	next := map[string]*site{}
	var order []string
	var starting []*site
	for _, c := range sites {
		old := m.sites[c.Name]
		switch {
		case old != nil && old.path == c.Path:
			old.mu.Lock()
			old.cfg = c
			old.mu.Unlock()
			select { // owners may have changed: check the root again now
			case old.recheckNow <- struct{}{}:
			default:
			}
			next[c.Name] = old
		default:
			s := newSite(m, c, nil)
			next[c.Name] = s
			starting = append(starting, s)
		}
		order = append(order, c.Name)
	}
	var stopping []chan struct{}
	var stopped []*site
	for name, s := range m.sites {
		if next[name] != s {
			stopped = append(stopped, s)
			if cancel := m.cancel[s]; cancel != nil {
				cancel()
				stopping = append(stopping, m.done[s])
				delete(m.cancel, s)
				delete(m.done, s)
			}
		}
	}
	m.sites, m.order = next, order
	m.mu.Unlock()

	for _, done := range stopping {
		<-done
	}
	for _, s := range stopped {
		s.sem <- struct{}{} // a prune in progress ends; later ones find the root closed
		<-s.sem
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range starting {
		if m.runCtx != nil && m.sites[s.name] == s && m.cancel[s] == nil {
			m.startLocked(s)
		}
	}
	return nil
}

// SiteNames lists the configured sites in config order.
func (m *Manager) SiteNames() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.order)
}
