// Package config owns sandboxd's configuration file (CONTRACT §10): the typed Config, the
// embedded default policy (default.toml, what `sandboxd config default` prints), loading a
// file over that default key by key, strict decoding (an unknown key is an error naming the
// key and its line), complete validation (every problem at once, each naming its key, line
// and value), and marshalling the effective config back to TOML (`sandboxd config show`).
//
// BurntSushi/toml parses the syntax; this package walks the parsed tree itself so that it
// can merge per key, give array entries their per-entry defaults, and report every problem
// with a position, which the library only knows for syntax errors (positions.go finds the
// line of each key by scanning the source).
package config
