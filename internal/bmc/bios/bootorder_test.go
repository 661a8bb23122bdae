package bios

import (
	"slices"
	"testing"
)

func TestFullOrder(t *testing.T) {
	for _, tc := range []struct{ order, current, want []string }{
		{[]string{"Boot0002"}, []string{"Boot0001", "Boot0002", "Boot0003"}, []string{"Boot0002", "Boot0001", "Boot0003"}},
		{[]string{"Boot0003", "Boot0001"}, []string{"Boot0001", "Boot0002", "Boot0003"}, []string{"Boot0003", "Boot0001", "Boot0002"}},
		{nil, []string{"Boot0001"}, []string{"Boot0001"}},
		{[]string{"Boot0001"}, []string{"Boot0001"}, []string{"Boot0001"}},
	} {
		if got := fullOrder(tc.order, tc.current); !slices.Equal(got, tc.want) {
			t.Errorf("fullOrder(%v, %v) = %v, want %v", tc.order, tc.current, got, tc.want)
		}
	}
}
