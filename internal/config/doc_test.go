package config

import (
	"os"
	"strings"
	"testing"
)

// TestDocsShowTheEmbeddedDefault keeps docs/config.md's reference block identical to
// the default the binary embeds, so the documentation cannot drift.
func TestDocsShowTheEmbeddedDefault(t *testing.T) {
	b, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "```toml\n")
	if start < 0 {
		t.Fatal("docs/config.md has no ```toml block")
	}
	rest := doc[start+len("```toml\n"):]
	end := strings.Index(rest, "```")
	if end < 0 {
		t.Fatal("unterminated toml block in docs/config.md")
	}
	if rest[:end] != Default() {
		t.Fatal("docs/config.md's default config differs from the embedded default.toml; regenerate it (see the Makefile's docs target)")
	}
}
