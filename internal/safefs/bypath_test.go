package safefs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// byPathCalls are the deletions and renames-over that take a path, not a directory fd.
var byPathCalls = map[string]map[string]bool{
	"os":                    {"Remove": true, "RemoveAll": true, "Rename": true},
	"syscall":               {"Unlink": true, "Rmdir": true, "Rename": true},
	"golang.org/x/sys/unix": {"Unlink": true, "Rmdir": true, "Rename": true},
}

// deletionsByPath lists the calls in one file's source that delete or rename over by path
// with no comment saying "by path" (and why) on their line or the three lines above.
func deletionsByPath(fset *token.FileSet, name string, src any) ([]string, error) {
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	local := map[string]string{} // local package name -> import path
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		n := filepath.Base(p)
		if im.Name != nil {
			n = im.Name.Name
		}
		local[n] = p
	}
	marked := map[int]bool{}
	for _, cg := range f.Comments {
		if strings.Contains(strings.ToLower(cg.Text()), "by path") {
			for l := fset.Position(cg.Pos()).Line; l <= fset.Position(cg.End()).Line; l++ {
				marked[l] = true
			}
		}
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		x, ok := sel.X.(*ast.Ident)
		if !ok || !byPathCalls[local[x.Name]][sel.Sel.Name] {
			return true
		}
		pos := fset.Position(call.Pos())
		for l := pos.Line - 3; l <= pos.Line; l++ {
			if marked[l] {
				return true
			}
		}
		out = append(out, pos.String()+": "+x.Name+"."+sel.Sel.Name)
		return true
	})
	return out, nil
}

// Every deletion or rename-over in the module's non-test code goes beneath a directory fd
// (this package, or unlinkat/renameat on a safely walked fd), or says at the call why a
// path is safe there (issue 9): a new os.Remove in the daemon fails this test.
func TestNoDeletionByPathUnexplained(t *testing.T) {
	fset := token.NewFileSet()
	root := filepath.Join("..", "..")
	files := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "testdata", "vendor", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		files++
		bad, err := deletionsByPath(fset, p, nil)
		if err != nil {
			return err
		}
		for _, b := range bad {
			t.Errorf("%s deletes or renames by path: work beneath a safefs Root's fd, or say on the call why a path is safe (a comment with \"by path\")", b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("scanned %d files from %s: not the module", files, root)
	}
}

// The check itself can fail: an unexplained os.Remove, an aliased unix.Rmdir are found;
// the same with a "by path" comment are not.
func TestDeletionsByPathIsFound(t *testing.T) {
	src := `package p
import (
	"os"
	xunix "golang.org/x/sys/unix"
)
func f() {
	os.Remove("/a")
	xunix.Rmdir("/b")
	// By path: a directory this process made 0700.
	os.RemoveAll("/c")
	os.Rename("/d", "/e") // by path: as above
	os.Mkdir("/f", 0)
}
`
	bad, err := deletionsByPath(token.NewFileSet(), "p.go", src)
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) != 2 || !strings.HasSuffix(bad[0], "os.Remove") || !strings.HasSuffix(bad[1], "xunix.Rmdir") {
		t.Errorf("found %v, want os.Remove and xunix.Rmdir only", bad)
	}
}
