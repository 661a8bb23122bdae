// Package syncbuf holds a bytes.Buffer safe for one writer and concurrent readers, for tests that
// read a command's or a subprocess's output while it still runs, and a writer several goroutines
// can share.
//
// It is only a buffer: it imports no metalhub package and knows nothing of what is written.
package syncbuf

import (
	"bytes"
	"io"
	"sync"
)

// Buffer is a mutex-guarded bytes.Buffer.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Writer serializes writes to an io.Writer shared by goroutines (a terminal, a log), so that
// their output does not interleave mid-write.
type Writer struct {
	mu sync.Mutex
	w  io.Writer
}

// NewWriter wraps w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes p to the wrapped writer, one caller at a time.
func (l *Writer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
