package api

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// A log line names a mount's registrant by its fields: registered_by printed
// "&{UID:0 GID:0 Groups:[]}" (issue 23 item 8).
func TestRegistrantInALogLine(t *testing.T) {
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("registered", "registered_by", &Registrant{UID: 1000, GID: 100, Groups: []uint32{100, 27}})
	line := buf.String()
	if strings.Contains(line, "&{") || !strings.Contains(line, "registered_by.uid=1000") || !strings.Contains(line, "registered_by.groups=100,27") {
		t.Errorf("log line: %s", line)
	}
	buf.Reset()
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("registered", "registered_by", &Registrant{UID: 0})
	if !strings.Contains(buf.String(), `"registered_by":{"uid":0,"gid":0,"groups":""}`) {
		t.Errorf("JSON log line: %s", buf.String())
	}
}
