package mountwatch

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// The test binary doubles as the probe child and as the FUSE servers of the tests, so
// that a test can kill a server (disconnected) or make it stop answering (hung) without
// hanging its own process.
//
//	mount-probe ...     ProbeMain
//	serve-testfs ...    serve a loopback fs at --dir (SIGUSR1: hang every request)
//	start-testfs ...    start serve-testfs detached, wait until mounted, exit (remount_command)

// testServer decides, per request, whether to answer, deny or hang.
type testServer struct {
	hang    atomic.Bool
	cred    string // credential file; "" means never expires
	reload  bool   // re-read the file on every request (refreshable credentials)
	expires atomic.Int64
}

func (s *testServer) expired() bool {
	if s.cred == "" {
		return false
	}
	if s.reload {
		if e, err := credExpiration(s.cred); err == nil {
			s.expires.Store(e.UnixNano())
		}
	}
	return time.Now().UnixNano() >= s.expires.Load()
}

func credExpiration(path string) (time.Time, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, err
	}
	var d struct{ Expiration string }
	if err := json.Unmarshal(b, &d); err != nil {
		return time.Time{}, err
	}
	return time.Parse(time.RFC3339Nano, d.Expiration)
}

// gate blocks forever when hung and denies like geesefs once the credential expired.
func (s *testServer) gate() syscall.Errno {
	if s.hang.Load() {
		select {}
	}
	if s.expired() {
		return syscall.EACCES
	}
	return 0
}

type testNode struct {
	fs.LoopbackNode
	srv *testServer
}

func (n *testNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.srv.gate(); e != 0 {
		return nil, e
	}
	return n.LoopbackNode.Lookup(ctx, name, out)
}

func (n *testNode) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if e := n.srv.gate(); e != 0 {
		return nil, 0, e
	}
	return n.LoopbackNode.OpendirHandle(ctx, flags)
}

func (n *testNode) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	if e := n.srv.gate(); e != 0 {
		return nil, e
	}
	return n.LoopbackNode.Readdir(ctx)
}

func (n *testNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if e := n.srv.gate(); e != 0 {
		return nil, nil, 0, e
	}
	return n.LoopbackNode.Create(ctx, name, flags, mode, out)
}

// Getattr answers even when the credential expired (geesefs serves the root's attributes
// from memory); it only hangs.
func (n *testNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if n.srv.hang.Load() {
		select {}
	}
	return n.LoopbackNode.Getattr(ctx, f, out)
}

func serveTestFS(args []string) int {
	fl := flag.NewFlagSet("serve-testfs", flag.ContinueOnError)
	dir := fl.String("dir", "", "mountpoint")
	backing := fl.String("backing", "", "backing directory")
	cred := fl.String("cred", "", "credential file")
	reload := fl.Bool("reload", false, "re-read the credential file on every request")
	uid := fl.Int("user-id", -1, "user_id= of the mount (no allow_other)")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	srv := &testServer{cred: *cred, reload: *reload}
	if *cred != "" {
		e, err := credExpiration(*cred)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		srv.expires.Store(e.UnixNano())
	}
	var st syscall.Stat_t
	if err := syscall.Stat(*backing, &st); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	lr := &fs.LoopbackRoot{Path: *backing, Dev: uint64(st.Dev)}
	lr.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &testNode{LoopbackNode: fs.LoopbackNode{RootData: r}, srv: srv}
	}
	root := lr.NewNode(lr, nil, "", &st)
	lr.RootNode = root
	one := time.Second
	mo := fuse.MountOptions{DirectMount: true, DirectMountStrict: true, FsName: "testfs", Name: "testfs"}
	var server *fuse.Server
	var err error
	if *uid >= 0 {
		// A mount owned by another user, without allow_other: root mounts it directly with
		// user_id= (later options override go-fuse's own user_id=0). /dev/fuse is 0600
		// here, so the server cannot run as that user through fusermount3. fs.Mount's
		// WaitMount would open a file on the mount as root and get EACCES: serve directly.
		mo.Options = []string{fmt.Sprintf("user_id=%d", *uid), fmt.Sprintf("group_id=%d", *uid)}
		opts := &fs.Options{MountOptions: mo, AttrTimeout: &one}
		server, err = fuse.NewServer(fs.NewNodeFS(root, opts), *dir, &mo)
		if err == nil {
			go server.Serve()
		}
	} else {
		server, err = fs.Mount(*dir, root, &fs.Options{MountOptions: mo, AttrTimeout: &one})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mount:", err)
		fmt.Println("error:", err)
		return 1
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGTERM)
	go func() {
		for s := range sig {
			if s == syscall.SIGUSR1 {
				srv.hang.Store(true)
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

// startTestFS starts serve-testfs detached (its own session, output not inherited, so a
// caller that waits for our output does not wait for the server), waits until it says
// ready, records its pid and exits. --kill-pidfile kills the previous server first, and
// --renew rewrites the credential file, as a restart with fresh static keys would.
func startTestFS(args []string) int {
	fl := flag.NewFlagSet("start-testfs", flag.ContinueOnError)
	pidfile := fl.String("pidfile", "", "file that keeps the server's pid")
	pidlog := fl.String("pidlog", "", "file every started pid is appended to, for cleanup")
	renew := fl.Duration("renew", 0, "rewrite --cred to expire this far ahead first")
	kill := fl.Bool("kill", false, "kill the server named in --pidfile first")
	cred := fl.String("cred", "", "")
	fl.String("dir", "", "")
	fl.String("backing", "", "")
	fl.Bool("reload", false, "")
	fl.Int("user-id", -1, "")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if *kill {
		if b, err := os.ReadFile(*pidfile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	if *renew > 0 {
		if err := writeCred(*cred, time.Now().Add(*renew)); err != nil {
			fmt.Println(err)
			return 1
		}
	}
	var serveArgs []string
	fl.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "dir", "backing", "cred", "reload", "user-id":
			serveArgs = append(serveArgs, "--"+f.Name+"="+f.Value.String())
		}
	})
	exe, _ := os.Executable()
	cmd := exec.Command(exe, append([]string{"serve-testfs"}, serveArgs...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Println(err)
		return 1
	}
	pid := cmd.Process.Pid
	if *pidlog != "" {
		f, err := os.OpenFile(*pidlog, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintln(f, pid)
			f.Close()
		}
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		fmt.Println("server did not start:", line)
		return 1
	}
	if *pidfile != "" {
		os.WriteFile(*pidfile, []byte(strconv.Itoa(pid)), 0o644)
	}
	fmt.Println("started", pid)
	return 0
}

// writeCred writes a credential file atomically.
func writeCred(path string, exp time.Time) error {
	tmp := path + ".tmp"
	b := fmt.Sprintf(`{"AccessKeyId":"test","Expiration":%q}`, exp.UTC().Format(time.RFC3339Nano))
	if err := os.WriteFile(tmp, []byte(b), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// helperMain dispatches the re-exec roles; ok is false when the binary runs as a test.
func helperMain() (int, bool) {
	if len(os.Args) < 2 {
		return 0, false
	}
	switch os.Args[1] {
	case "mount-probe":
		return ProbeMain(os.Args[2:], os.Stdout), true
	case "serve-testfs":
		return serveTestFS(os.Args[2:]), true
	case "start-testfs":
		return startTestFS(os.Args[2:]), true
	}
	return 0, false
}

var _ = filepath.Join
