// Package deptest holds the test that keeps sandboxd's layering (STYLE.md, "The house"):
// which of the module's packages may import which, and why. It has no code of its own;
// the rules and their reasons are in deps_test.go, the one place to read or change them.
package deptest
