package console

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Host key errors, for errors.Is; their messages say how to fix them.
var (
	// ErrUnknownHostKey: neither the pinned fingerprint nor known_hosts vouches for the key.
	ErrUnknownHostKey = errors.New("unknown host key")
	// ErrHostKeyMismatch: the key is not the one pinned or recorded (or it is revoked).
	ErrHostKeyMismatch = errors.New("host key mismatch")
)

// HostKeyCallback checks a BMC's SSH host key: against fingerprint when given ("SHA256:...", as
// ssh-keygen -lf prints it), else against knownHostsFile (~/.ssh/known_hosts when ""; a
// missing file knows no host). insecure accepts any key.
func HostKeyCallback(knownHostsFile, fingerprint string, insecure bool) (ssh.HostKeyCallback, error) {
	if insecure {
		return ssh.InsecureIgnoreHostKey(), nil
	}
	if fingerprint != "" {
		want, err := normalizeFingerprint(fingerprint)
		if err != nil {
			return nil, err
		}
		return func(host string, _ net.Addr, key ssh.PublicKey) error {
			if got := ssh.FingerprintSHA256(key); got != want {
				return fmt.Errorf("%w: %s presents %s key %s, not the pinned %s: the BMC's key changed or this is not that BMC; "+
					"check the new fingerprint out of band (the BMC's web UI or local console) before passing it with --host-key-fingerprint",
					ErrHostKeyMismatch, host, key.Type(), got, want)
			}
			return nil
		}, nil
	}
	if knownHostsFile == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("find ~/.ssh/known_hosts: %w", err)
		}
		knownHostsFile = filepath.Join(home, ".ssh", "known_hosts")
	}
	check, err := knownhosts.New(knownHostsFile)
	if errors.Is(err, os.ErrNotExist) {
		check = func(string, net.Addr, ssh.PublicKey) error { return &knownhosts.KeyError{} }
	} else if err != nil {
		return nil, fmt.Errorf("read known hosts: %w", err)
	}
	return func(host string, remote net.Addr, key ssh.PublicKey) error {
		err := check(host, remote, key)
		var keyErr *knownhosts.KeyError
		var revoked *knownhosts.RevokedError
		fp := ssh.FingerprintSHA256(key)
		switch {
		case err == nil:
			return nil
		case errors.As(err, &revoked):
			return fmt.Errorf("%w: the %s key %s of %s is revoked in %s", ErrHostKeyMismatch, key.Type(), fp, host, revoked.Revoked.Filename)
		case errors.As(err, &keyErr) && len(keyErr.Want) == 0:
			return fmt.Errorf("%w: %s presents %s key %s, which %s does not know; check that fingerprint out of band "+
				"(the BMC's web UI or local console), then pass --host-key-fingerprint %s, or add this line to %s:\n%s",
				ErrUnknownHostKey, host, key.Type(), fp, knownHostsFile, fp, knownHostsFile, knownhosts.Line([]string{host}, key))
		case errors.As(err, &keyErr):
			w := keyErr.Want[0]
			return fmt.Errorf("%w: %s presents %s key %s, but %s:%d records %s %s: the BMC's key changed or this is not that BMC; "+
				"check the new fingerprint out of band, then replace the line (ssh-keygen -R '%s' -f %s) or pass --host-key-fingerprint %s",
				ErrHostKeyMismatch, host, key.Type(), fp, w.Filename, w.Line, w.Key.Type(), ssh.FingerprintSHA256(w.Key),
				knownhosts.Normalize(host), w.Filename, fp)
		default:
			return err
		}
	}, nil
}

// normalizeFingerprint accepts "SHA256:<base64>" (padded or not, the prefix optional) and
// returns it as ssh.FingerprintSHA256 writes it.
func normalizeFingerprint(fp string) (string, error) {
	s := strings.TrimSpace(fp)
	if i := strings.IndexByte(s, ':'); i >= 0 {
		if !strings.EqualFold(s[:i], "SHA256") {
			return "", fmt.Errorf("host key fingerprint %q: only SHA256 fingerprints are taken (ssh-keygen -lf prints them)", fp)
		}
		s = s[i+1:]
	}
	s = strings.TrimRight(s, "=")
	if raw, err := base64.RawStdEncoding.DecodeString(s); err != nil || len(raw) != 32 {
		return "", fmt.Errorf("host key fingerprint %q is not a SHA256 fingerprint (SHA256: and 43 base64 characters)", fp)
	}
	return "SHA256:" + s, nil
}
