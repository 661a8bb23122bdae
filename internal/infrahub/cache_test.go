package infrahub

import (
	"testing"
	"time"
)

// A client no pass asked for within Idle is dropped: the URLs and identities of syncs that are
// gone do not stay cached for the life of the process.
func TestCacheDropsIdleClients(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	c := &Cache{Idle: time.Minute, Now: func() time.Time { return now }}
	a := Config{URL: "https://a.example", APIToken: "ta"}
	b := Config{URL: "https://b.example", APIToken: "tb"}
	ca, err := c.Get(a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(b); err != nil {
		t.Fatal(err)
	}
	now = now.Add(40 * time.Second)
	if again, _ := c.Get(a); again != ca || c.Len() != 2 {
		t.Fatalf("a client in use was rebuilt or one dropped early: same=%v len=%d", again == ca, c.Len())
	}
	now = now.Add(40 * time.Second) // b idle for 80 s, a for 40 s
	if again, _ := c.Get(a); again != ca || c.Len() != 1 {
		t.Fatalf("after b's idle time: same=%v len=%d, want a kept and b dropped", again == ca, c.Len())
	}
}
