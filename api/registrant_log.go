package api

import (
	"fmt"
	"log/slog"
	"strings"
)

// LogValue renders a registrant in a log line as its fields (registered_by.uid=0
// registered_by.gid=0 ...), not as Go's "&{UID:0 GID:0 Groups:[]}" (issue 23 item 8).
func (r *Registrant) LogValue() slog.Value {
	if r == nil {
		return slog.StringValue("root")
	}
	groups := make([]string, len(r.Groups))
	for i, g := range r.Groups {
		groups[i] = fmt.Sprint(g)
	}
	attrs := []slog.Attr{slog.Any("uid", r.UID), slog.Any("gid", r.GID), slog.String("groups", strings.Join(groups, ","))}
	if r.PidNS != "" {
		attrs = append(attrs, slog.String("pidns", r.PidNS))
	}
	return slog.GroupValue(attrs...)
}
