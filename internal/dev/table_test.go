package dev

import (
	"strings"
	"testing"
)

func TestRedraw(t *testing.T) {
	text := "intro\n\nA\nB\nC\nD\nE\n"
	for _, tc := range []struct {
		height int
		want   string
	}{
		{0, "intro\n\nA\nB\nC\nD\nE\n"},
		{40, "intro\n\nA\nB\nC\nD\nE\n"},
		{6, "intro\n\nA\nB\n... 3 more lines (metalhub servers lists them all)\n"},
	} {
		got := redraw(text, tc.height)
		if !strings.HasPrefix(got, "\x1b[H\x1b[2J") {
			t.Errorf("height %d: does not start by clearing the screen: %q", tc.height, got)
		}
		if body := strings.TrimPrefix(got, "\x1b[H\x1b[2J"); body != tc.want {
			t.Errorf("height %d:\n got %q\nwant %q", tc.height, body, tc.want)
		}
	}
}
