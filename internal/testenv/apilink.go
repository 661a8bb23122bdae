package testenv

import (
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"

	"k8s.io/client-go/tools/clientcmd"
)

// APILink stands between one manager process and the API server, as its network does: it
// forwards TCP until partitioned, and then drops every connection and answers none of the new
// ones (the process keeps running and keeps reaching its BMCs). Healed, it forwards again.
type APILink struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
}

// NewAPILink listens on a loopback port of its own and forwards to target (host:port).
func NewAPILink(target string) (*APILink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for an API link: %w", err)
	}
	l := &APILink{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go l.serve()
	return l, nil
}

// Addr is where the link listens.
func (l *APILink) Addr() string { return l.ln.Addr().String() }

func (l *APILink) serve() {
	for {
		in, err := l.ln.Accept()
		if err != nil {
			return
		}
		if !l.track(in) {
			continue // cut: accepted and never answered, as a black hole does
		}
		out, err := net.Dial("tcp", l.target)
		if err != nil || !l.track(out) {
			in.Close()
			continue
		}
		go func() { _, _ = io.Copy(out, in); out.Close() }()
		go func() { _, _ = io.Copy(in, out); in.Close() }()
	}
}

// track keeps c to be closed later; false when the link is cut (c is then held unanswered).
func (l *APILink) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.conns[c] = struct{}{}
	return !l.cut
}

// dropAll closes every connection the link holds (under l.mu).
func (l *APILink) dropAll() {
	for c := range l.conns {
		c.Close()
	}
	l.conns = map[net.Conn]struct{}{}
}

// Partition cuts the link: the open connections go, new ones hang.
func (l *APILink) Partition() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = true
	l.dropAll()
}

// Heal ends a partition: the connections held unanswered are closed (their clients dial again)
// and new ones are forwarded.
func (l *APILink) Heal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = false
	l.dropAll()
}

// Partitioned reports whether the link is cut.
func (l *APILink) Partitioned() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cut
}

// Close stops the link and drops what it holds.
func (l *APILink) Close() {
	l.ln.Close()
	l.Partition()
}

// KubeconfigVia writes into dir a copy of the kubeconfig at from whose servers are reached
// through link, and returns its path.
func KubeconfigVia(from, dir string, link *APILink) (string, error) {
	cfg, err := clientcmd.LoadFromFile(from)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", from, err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + link.Addr()
	}
	path := filepath.Join(dir, "kubeconfig-via-"+link.Addr())
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, nil
}
