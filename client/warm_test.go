package client

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/sandboxd/sandboxd/api"
)

type warmNode struct {
	Name     string               `json:"name"`
	Next     *warmNode            `json:"next"`
	Children map[string]warmNode  `json:"children"`
	List     []warmNode           `json:"list"`
	Seen     map[string]*warmLeaf `json:"seen"`
}

type warmLeaf struct {
	N int `json:"n"`
}

// warmDecoders (BeginSpawn's warm-up while the call is in flight, issue 27) ends on a
// type that refers to itself and leaves decoding as it was: a warmed type decodes an
// offer the same as a cold one.
func TestWarmDecoders(t *testing.T) {
	warmDecoders(reflect.TypeFor[warmNode](), reflect.TypeFor[api.SpawnOffer](), reflect.TypeFor[api.SpawnAnswer](), reflect.TypeFor[api.Problem]())
	in := `{"job":{"id":"j1","cgroup":"/sys/fs/cgroup/x/jobs/j1","state":"running","ttl_seconds":180,"labels":{"a":"b"},"owner":{"uid":7},"launch":{"verdict":"ok"}}}`
	var o api.SpawnOffer
	if err := json.Unmarshal([]byte(in), &o); err != nil {
		t.Fatal(err)
	}
	if o.Job.ID != "j1" || o.Job.Labels["a"] != "b" || o.Job.Owner == nil || o.Job.Owner.UID != 7 || o.Job.Launch == nil || o.Job.TTLSeconds != 180 {
		t.Errorf("decoded after the warm-up: %+v", o.Job)
	}
	var n warmNode
	if err := json.Unmarshal([]byte(`{"name":"a","next":{"name":"b"},"children":{"c":{"name":"c"}},"seen":{"x":{"n":3}}}`), &n); err != nil || n.Next.Name != "b" || n.Children["c"].Name != "c" || n.Seen["x"].N != 3 {
		t.Errorf("a self-referring type after the warm-up: %+v %v", n, err)
	}
}
