package console

import (
	"bytes"
	"io"
	"testing"
)

type nopCloser struct{ bytes.Buffer }

func (*nopCloser) Close() error { return nil }

// chunked yields one chunk per Read, to check the escape across reads.
type chunked struct{ chunks []string }

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	c.chunks = c.chunks[1:]
	return n, nil
}

func TestEscape(t *testing.T) {
	for _, tc := range []struct {
		chunks  []string
		sent    string
		escaped bool
	}{
		{[]string{"~."}, "", true},
		{[]string{"ls\r~.rest"}, "ls\r", true},
		{[]string{"ls\r~", ".rest"}, "ls\r", true},
		{[]string{"a~.b\n"}, "a~.b\n", false},
		{[]string{"\r~~.\r"}, "\r~.\r", false},
		{[]string{"\r~x"}, "\r~x", false},
		{[]string{"\n~"}, "\n~", false},
	} {
		var dst nopCloser
		escaped := make(chan struct{})
		copyIn(&dst, &chunked{chunks: tc.chunks}, escaped)
		got := false
		select {
		case <-escaped:
			got = true
		default:
		}
		if dst.String() != tc.sent || got != tc.escaped {
			t.Errorf("%q: sent %q escaped %v, want %q %v", tc.chunks, dst.String(), got, tc.sent, tc.escaped)
		}
	}
}
