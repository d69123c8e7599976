package api

import (
	"fmt"
	"net/http"
)

// Code is the machine-readable error code of a problem document.
type Code string

// Error codes of CONTRACT §3.
const (
	CodeBadRequest       Code = "bad_request"
	CodeForbidden        Code = "forbidden"
	CodeNotFound         Code = "not_found"
	CodeMethodNotAllowed Code = "method_not_allowed"
	CodePayloadTooLarge  Code = "payload_too_large"
	CodeReplaceSandbox   Code = "replace_sandbox"
	CodeDiskFull         Code = "disk_full"
	CodeInodesExhausted  Code = "inodes_exhausted"
	CodeMountUnavailable Code = "mount_unavailable"
	CodeBusy             Code = "busy"
	CodeInternal         Code = "internal"
	// v1.1 (CONTRACT §11)
	CodeConflict        Code = "conflict"
	CodeJobsUnavailable Code = "jobs_unavailable"
	// CodeFilesystemUnavailable: a watched filesystem the call covers could not be
	// measured (its statfs failed: EIO, ENOENT, ESTALE, ENOTCONN, ...), so no verdict
	// about its space exists. Added to CONTRACT §3 by issue 10.
	CodeFilesystemUnavailable Code = "filesystem_unavailable"
	// CodeStateUnavailable: a registration could not be made durable (the job registry in
	// [jobs] registry_dir cannot be written), so it is refused rather than answered 201
	// and forgotten by a restart (CONTRACT §17, issue 20).
	CodeStateUnavailable Code = "state_unavailable"
)

type codeInfo struct {
	status int
	exit   int
	title  string
}

var codes = map[Code]codeInfo{
	CodeBadRequest:       {http.StatusBadRequest, 64, "bad request"},
	CodeForbidden:        {http.StatusForbidden, 77, "forbidden"},
	CodeNotFound:         {http.StatusNotFound, 78, "not found"},
	CodeMethodNotAllowed: {http.StatusMethodNotAllowed, 64, "method not allowed"},
	CodePayloadTooLarge:  {http.StatusRequestEntityTooLarge, 64, "payload too large"},
	CodeReplaceSandbox:   {http.StatusInsufficientStorage, 10, "replace sandbox"},
	CodeDiskFull:         {http.StatusInsufficientStorage, 73, "disk full"},
	CodeInodesExhausted:  {http.StatusInsufficientStorage, 73, "inodes exhausted"},
	CodeMountUnavailable: {http.StatusServiceUnavailable, 75, "mount unavailable"},
	CodeBusy:             {http.StatusServiceUnavailable, 75, "busy"},
	CodeInternal:         {http.StatusInternalServerError, 70, "internal error"},
	CodeConflict:         {http.StatusConflict, 65, "conflict"},
	CodeJobsUnavailable:  {http.StatusServiceUnavailable, 69, "jobs unavailable"},
	// 75 (EX_TEMPFAIL), as mount_unavailable: a filesystem that comes back answers again.
	CodeFilesystemUnavailable: {http.StatusServiceUnavailable, 75, "filesystem unavailable"},
	CodeStateUnavailable:      {http.StatusServiceUnavailable, 75, "state unavailable"},
}

// Codes lists every error code, in the precedence order of CONTRACT §3 for the ones that
// can coincide (not_found first, busy last), followed by the others.
var Codes = []Code{
	CodeNotFound, CodeReplaceSandbox, CodeDiskFull, CodeInodesExhausted,
	CodeMountUnavailable, CodeFilesystemUnavailable, CodeBusy,
	CodeBadRequest, CodeForbidden, CodeMethodNotAllowed, CodePayloadTooLarge, CodeInternal,
	CodeConflict, CodeJobsUnavailable, CodeStateUnavailable,
}

// Status is the HTTP status of the code (500 for an unknown code).
func (c Code) Status() int {
	if i, ok := codes[c]; ok {
		return i.status
	}
	return http.StatusInternalServerError
}

// ExitCode is the CLI's exit status for a refusal with this code (70 when unknown).
func (c Code) ExitCode() int {
	if i, ok := codes[c]; ok {
		return i.exit
	}
	return 70
}

// Title is the short human title of the code.
func (c Code) Title() string {
	if i, ok := codes[c]; ok {
		return i.title
	}
	return string(c)
}

// Precedence ranks the codes that can apply together: the lower wins (CONTRACT §3;
// filesystem_unavailable, added after it, ranks between mount_unavailable and busy).
// Codes outside that list rank after it.
func (c Code) Precedence() int {
	for i, k := range Codes[:7] {
		if k == c {
			return i
		}
	}
	return 100
}

// Problem is an RFC 9457 problem document, the body of every non-2xx answer.
type Problem struct {
	Type       string      `json:"type"`
	Status     int         `json:"status"`
	Title      string      `json:"title"`
	Code       Code        `json:"code"`
	Detail     string      `json:"detail"`
	Instance   string      `json:"instance,omitempty"`
	Filesystem *Filesystem `json:"filesystem,omitempty"`
	Mounts     []Mount     `json:"mounts,omitempty"`
	Warnings   []string    `json:"warnings,omitempty"`
	// RetryAfterSeconds mirrors the Retry-After header of a busy answer.
	RetryAfterSeconds int `json:"retry_after_seconds,omitempty"`
}

// NewProblem builds a problem document for code with a detail line.
func NewProblem(code Code, format string, args ...any) *Problem {
	return &Problem{
		Type:   "about:blank",
		Status: code.Status(),
		Title:  code.Title(),
		Code:   code,
		Detail: fmt.Sprintf(format, args...),
	}
}

// Error makes a *Problem an error, so handlers can return it.
func (p *Problem) Error() string {
	if p.Detail == "" {
		return string(p.Code)
	}
	return string(p.Code) + ": " + p.Detail
}

// ProblemContentType is the media type of problem documents.
const ProblemContentType = "application/problem+json"
