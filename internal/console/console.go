// Package console opens a server's serial console through its BMC's SSH serial console: Dial
// logs in to the BMC, Attach runs the console entry command on a pty and copies both ways until
// the BMC closes it, the context ends or the user types the escape sequence "~." at the start of
// a line, as with ssh. Putting the local terminal in raw mode is the caller's job.
//
// It knows no metalhub object and no cluster: the caller finds the BMC's address, credentials and
// console entry command (internal/cli through bmcaccess).
package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/metalhub/metalhub/internal/syncbuf"
)

// Target is a BMC's SSH serial console.
type Target struct {
	// Address is host:port (port 22 when missing).
	Address string
	// Username and Password log in to the BMC (password or keyboard-interactive).
	Username, Password string
	// EntryCommand selects the system's console once logged in (Redfish
	// SerialConsole.SSH.ConsoleEntryCommand, e.g. "console com2"); "" opens a shell, for BMCs
	// that put the console straight on the login.
	EntryCommand string
}

// Default pty size until Resize says otherwise.
const (
	defaultCols = 80
	defaultRows = 24
)

// Session is a logged-in connection to a BMC's SSH console.
type Session struct {
	t      Target
	client *ssh.Client

	mu         sync.Mutex
	cols, rows int
	cur        *ssh.Session // the attached one, for Resize
	closed     bool
}

// Dial connects and logs in to t, checking the BMC's host key with hostKey (see
// HostKeyCallback). ctx bounds the connection and the handshake only.
func Dial(ctx context.Context, t Target, hostKey ssh.HostKeyCallback) (*Session, error) {
	if hostKey == nil {
		return nil, errors.New("console: no host key check given (see HostKeyCallback)")
	}
	addr := t.Address
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "22")
	}
	t.Address = addr
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("connect to the serial console at %s: %w", addr, err)
	}
	// A BMC that accepts the connection but never answers must not hang the caller past ctx.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	cfg := &ssh.ClientConfig{
		User: t.Username,
		Auth: []ssh.AuthMethod{
			ssh.Password(t.Password),
			// Many BMCs only offer keyboard-interactive: answer every prompt with the password.
			ssh.KeyboardInteractive(func(_, _ string, questions []string, _ []bool) ([]string, error) {
				answers := make([]string, len(questions))
				for i := range answers {
					answers[i] = t.Password
				}
				return answers, nil
			}),
		},
		HostKeyCallback: hostKey,
	}
	cc, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if !stop() {
		if err == nil {
			cc.Close()
		}
		conn.Close()
		return nil, fmt.Errorf("log in to the serial console at %s: %w", addr, ctx.Err())
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("log in to the serial console at %s as %s: %w", addr, t.Username, err)
	}
	_ = conn.SetDeadline(time.Time{})
	return &Session{t: t, client: ssh.NewClient(cc, chans, reqs), cols: defaultCols, rows: defaultRows}, nil
}

// Resize sets the pty size: the one Attach requests, or, while attached, the window it reports.
func (s *Session) Resize(cols, rows int) error {
	if cols <= 0 || rows <= 0 {
		return fmt.Errorf("console: bad terminal size %dx%d", cols, rows)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cols, s.rows = cols, rows
	if s.cur != nil {
		return s.cur.WindowChange(rows, cols)
	}
	return nil
}

// Close ends the connection (and an attached console with it).
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	return s.client.Close()
}

// Attach opens the console on an xterm pty and copies in to the BMC and the BMC's output to
// out until the BMC ends it (nil, or an error when its command failed), ctx ends (ctx's error)
// or in yields "~." at the start of a line (nil). After ctx or the escape the Session is closed.
// "~~" at the start of a line sends one "~". in is read by a goroutine that may outlive Attach
// until its next Read returns.
func (s *Session) Attach(ctx context.Context, in io.Reader, out io.Writer) error {
	sess, err := s.client.NewSession()
	if err != nil {
		return fmt.Errorf("open a session on %s: %w", s.t.Address, err)
	}
	defer sess.Close()
	s.mu.Lock()
	cols, rows := s.cols, s.rows
	s.mu.Unlock()
	modes := ssh.TerminalModes{ssh.ECHO: 1, ssh.TTY_OP_ISPEED: 115200, ssh.TTY_OP_OSPEED: 115200}
	if err := sess.RequestPty("xterm", rows, cols, modes); err != nil {
		return fmt.Errorf("request a terminal on %s: %w", s.t.Address, err)
	}
	w := syncbuf.NewWriter(out) // stdout and stderr are copied by two goroutines
	sess.Stdout, sess.Stderr = w, w
	stdin, err := sess.StdinPipe()
	if err != nil {
		return err
	}
	if s.t.EntryCommand != "" {
		err = sess.Start(s.t.EntryCommand)
	} else {
		err = sess.Shell()
	}
	if err != nil {
		return fmt.Errorf("start the console on %s (%q): %w", s.t.Address, s.t.EntryCommand, err)
	}
	s.mu.Lock()
	s.cur = sess
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.cur = nil
		s.mu.Unlock()
	}()

	done := make(chan error, 1)
	go func() { done <- sess.Wait() }()
	escaped := make(chan struct{})
	go copyIn(stdin, in, escaped)

	select {
	case err := <-done:
		return s.ended(err)
	case <-escaped:
		_ = s.Close()
		<-done // nothing is written to out after Attach returns
		return nil
	case <-ctx.Done():
		_ = s.Close()
		<-done
		return ctx.Err()
	}
}

// ended turns the remote's end of the console into Attach's result.
func (s *Session) ended(err error) error {
	var exit *ssh.ExitError
	var missing *ssh.ExitMissingError
	switch {
	case err == nil, errors.As(err, &missing):
		// Many BMCs just close the channel.
		return nil
	case errors.As(err, &exit):
		return fmt.Errorf("the console on %s (%q) ended with status %d", s.t.Address, s.t.EntryCommand, exit.ExitStatus())
	default:
		return fmt.Errorf("the console on %s: %w", s.t.Address, err)
	}
}

// copyIn copies in to dst, watching for the escape "~." at the start of a line (closing
// escaped); at the end of in it closes dst so the BMC sees it.
func copyIn(dst io.WriteCloser, in io.Reader, escaped chan<- struct{}) {
	lineStart, tilde := true, false
	buf := make([]byte, 4096)
	for {
		n, err := in.Read(buf)
		out := make([]byte, 0, n+1)
		for _, c := range buf[:n] {
			if tilde {
				tilde = false
				switch c {
				case '.':
					if len(out) > 0 {
						_, _ = dst.Write(out)
					}
					close(escaped)
					return
				case '~':
					out = append(out, '~')
					lineStart = false
					continue
				default:
					out = append(out, '~')
				}
			} else if lineStart && c == '~' {
				tilde = true // held until the next byte says whether it escapes
				continue
			}
			out = append(out, c)
			lineStart = c == '\r' || c == '\n'
		}
		if len(out) > 0 {
			if _, werr := dst.Write(out); werr != nil {
				return
			}
		}
		if err != nil {
			if tilde {
				_, _ = dst.Write([]byte{'~'})
			}
			_ = dst.Close()
			return
		}
	}
}
