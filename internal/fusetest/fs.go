package fusetest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// gate decides, per request, whether to answer, deny or hang.
type gate struct {
	hang     atomic.Bool
	heldMu   sync.Mutex
	held     int64  // requests held by wait
	heldFile string // where held is written; "" for none
	cred     string // credential file; "" means never expires
	reload   bool   // re-read the file on every request (refreshable credentials)
	expires  atomic.Int64
}

func (g *gate) expired() bool {
	if g.cred == "" {
		return false
	}
	if g.reload {
		if e, err := CredExpiration(g.cred); err == nil {
			g.expires.Store(e.UnixNano())
		}
	}
	return time.Now().UnixNano() >= g.expires.Load()
}

// wait blocks while the server is hung (until SIGUSR2 or an abort). While it holds a
// request, the count of held requests is in heldFile: the request was read from the
// kernel, so its caller now waits where even SIGKILL does not free it.
func (g *gate) wait() {
	if !g.hang.Load() {
		return
	}
	g.noteHeld(1)
	defer g.noteHeld(-1)
	for g.hang.Load() {
		time.Sleep(20 * time.Millisecond)
	}
}

func (g *gate) noteHeld(delta int64) {
	g.heldMu.Lock()
	defer g.heldMu.Unlock()
	g.held += delta
	if g.heldFile == "" {
		return
	}
	tmp := fmt.Sprintf("%s.%d", g.heldFile, os.Getpid())
	if os.WriteFile(tmp, []byte(fmt.Sprint(g.held)), 0o644) == nil {
		os.Rename(tmp, g.heldFile) // by path: the test server's own file in its private state dir
	}
}

// check blocks while hung and denies like geesefs once the credential expired.
func (g *gate) check() syscall.Errno {
	g.wait()
	if g.expired() {
		return syscall.EACCES
	}
	return 0
}

// node is a loopback node whose name operations go through the gate.
type node struct {
	*fs.LoopbackNode
	g *gate
}

var _ fs.NodeWrapChilder = (*node)(nil)

// WrapChild puts every node the loopback makes beneath a node (lookup, create, mkdir,
// mknod, symlink) behind the same gate.
func (n *node) WrapChild(_ context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	if lb, ok := ops.(*fs.LoopbackNode); ok {
		return &node{LoopbackNode: lb, g: n.g}
	}
	return ops
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.g.check(); e != 0 {
		return nil, e
	}
	return n.LoopbackNode.Lookup(ctx, name, out)
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if e := n.g.check(); e != 0 {
		return nil, 0, e
	}
	return n.LoopbackNode.OpendirHandle(ctx, flags)
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	if e := n.g.check(); e != 0 {
		return nil, e
	}
	return n.LoopbackNode.Readdir(ctx)
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if e := n.g.check(); e != 0 {
		return nil, nil, 0, e
	}
	return n.LoopbackNode.Create(ctx, name, flags, mode, out)
}

// Getattr answers even when the credential expired (geesefs serves the root's attributes
// from memory); it only hangs.
func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.g.wait()
	return n.LoopbackNode.Getattr(ctx, f, out)
}

// serve is the server role: mount the filesystem on --dir, print "ready" (or "error: ...")
// and serve until SIGTERM (unmount) or SIGKILL (dead mount). SIGUSR1 makes every request
// hang from then on, SIGUSR2 answer again; each is acknowledged in --ack once in force
// ("PID 1" hung, "PID 0" answering), so that Hang and Unhang return only then.
func serve(args []string) int {
	fl := flag.NewFlagSet(roleServe, flag.ContinueOnError)
	dir := fl.String("dir", "", "mountpoint")
	backing := fl.String("backing", "", "backing directory")
	cred := fl.String("cred", "", "credential file")
	reload := fl.Bool("reload", false, "re-read the credential file on every request")
	uid := fl.Int("user-id", 0, "user_id= of the mount (no allow_other) when not root")
	ack := fl.String("ack", "", "file SIGUSR1 and SIGUSR2 are acknowledged in")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	g := &gate{cred: *cred, reload: *reload}
	if *ack != "" {
		g.heldFile = *ack + ".held"
	}
	if *cred != "" {
		e, err := CredExpiration(*cred)
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		g.expires.Store(e.UnixNano())
	}
	server, err := mount(*dir, *backing, *uid, g)
	if err != nil {
		fmt.Println("error: mount:", err)
		return 1
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGTERM)
	go func() {
		for s := range sig {
			switch s {
			case syscall.SIGUSR1, syscall.SIGUSR2:
				hung := s == syscall.SIGUSR1
				g.hang.Store(hung)
				if *ack != "" {
					writeAck(*ack, hung)
				}
				continue
			}
			server.Unmount()
			os.Exit(0)
		}
	}()
	fmt.Println("ready")
	server.Wait()
	return 0
}

func mount(dir, backing string, uid int, g *gate) (*fuse.Server, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		return nil, fmt.Errorf("stat backing %s: %w", backing, err)
	}
	lr := &fs.LoopbackRoot{Path: backing, Dev: uint64(st.Dev)}
	root := &node{LoopbackNode: &fs.LoopbackNode{RootData: lr}, g: g}
	lr.RootNode = root
	one := time.Second
	mo := fuse.MountOptions{DirectMount: true, DirectMountStrict: true, FsName: "fusetest", Name: "fusetest"}
	if uid == 0 {
		return fs.Mount(dir, root, &fs.Options{MountOptions: mo, AttrTimeout: &one})
	}
	// A mount owned by another user, without allow_other: root mounts it directly with
	// user_id= (later options override go-fuse's own user_id=0). /dev/fuse is 0600 here,
	// so the server cannot run as that user through fusermount3. fs.Mount's WaitMount
	// would open a file on the mount as root and get EACCES: serve directly.
	mo.Options = []string{fmt.Sprintf("user_id=%d", uid), fmt.Sprintf("group_id=%d", uid)}
	opts := &fs.Options{MountOptions: mo, AttrTimeout: &one}
	server, err := fuse.NewServer(fs.NewNodeFS(root, opts), dir, &mo)
	if err != nil {
		return nil, err
	}
	go server.Serve()
	return server, nil
}

// writeAck records in path that this server is hung or answering, replacing the file at
// once (a reader never sees it half written).
func writeAck(path string, hung bool) {
	state := 0
	if hung {
		state = 1
	}
	tmp := fmt.Sprintf("%s.%d", path, os.Getpid())
	if os.WriteFile(tmp, []byte(fmt.Sprintf("%d %d", os.Getpid(), state)), 0o644) == nil {
		os.Rename(tmp, path) // by path: the test server's own file in its private state dir
	}
}
