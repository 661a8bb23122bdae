package policy

import "testing"

func TestHostGate(t *testing.T) {
	g := NewHostGate(2)
	a1, ok1 := g.Enter("https://a:443")
	_, ok2 := g.Enter("https://a:443")
	_, ok3 := g.Enter("https://a:443")
	_, okB := g.Enter("https://b:443")
	if !ok1 || !ok2 || ok3 || !okB {
		t.Fatalf("admitted a: %v %v %v, b: %v; want true true false, true", ok1, ok2, ok3, okB)
	}
	a1()
	a1() // leaving twice gives back one slot
	if n := g.inFlight("https://a:443"); n != 1 {
		t.Fatalf("a in flight after one left (twice): %d, want 1", n)
	}
	if _, ok := g.Enter("https://a:443"); !ok {
		t.Fatal("a slot given back was not taken again")
	}
	if _, ok := g.Enter("https://a:443"); ok {
		t.Fatal("a third pass on a admitted")
	}

	for _, unlimited := range []*HostGate{nil, NewHostGate(0)} {
		for range 10 {
			if _, ok := unlimited.Enter("h"); !ok {
				t.Fatal("a gate without a limit turned a pass away")
			}
		}
	}
}

func TestPerHostDefault(t *testing.T) {
	for _, c := range []struct{ workers, want int }{{1, 1}, {2, 1}, {3, 2}, {4, 2}, {8, 4}} {
		if got := PerHostDefault(c.workers); got != c.want {
			t.Errorf("perHostDefault(%d) = %d, want %d", c.workers, got, c.want)
		}
	}
}
