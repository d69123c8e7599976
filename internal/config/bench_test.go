package config

import "testing"

func BenchmarkParseDefault(b *testing.B) {
	data := []byte(Default())
	for b.Loop() {
		if _, err := Parse(data, "default.toml"); err != nil {
			b.Fatal(err)
		}
	}
}
