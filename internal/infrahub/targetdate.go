package infrahub

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Relative target dates look back from now: now-<N>h, now-<N>m, now-<N>s or a
// compound in that order (now-1h30m). Infrahub finds these units anywhere in
// the string and always subtracts, so anything looser is misread silently:
// now+2h means two hours ago, and now-2d (Vidra's own CRD example) is
// rejected by the server. We therefore accept only what it reads correctly.
var relativeRE = regexp.MustCompile(`^now-(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$`)

// Forms that look relative but that Infrahub cannot read as intended.
var (
	signedRE  = regexp.MustCompile(`^now\s*([+-])\s*(.*)$`)
	dayWeekRE = regexp.MustCompile(`^(\d+)\s*(d|day|days|w|week|weeks)$`)
	bareRE    = regexp.MustCompile(`^[+-]?\d+\s*[a-z]+$`)
)

// Zone-less timestamps are read as UTC by Infrahub, so they are unambiguous.
var absoluteLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04:05.999999999",
}

// NormalizeTargetDate validates a targetDate and returns the value to send as
// `at`: "" for the current state ("" or "now"), an RFC 3339 UTC timestamp for
// absolute dates, or the relative form unchanged. The error, of kind
// ErrInvalidTargetDate, says what to write instead.
func NormalizeTargetDate(s string) (string, error) {
	v := strings.TrimSpace(s)
	if v == "" || strings.EqualFold(v, "now") {
		return "", nil
	}
	if t, ok := parseAbsolute(v); ok {
		return t.UTC().Format(time.RFC3339Nano), nil
	}
	lv := strings.ToLower(v)
	if _, err := relativeOffset(lv); err != nil {
		return "", &Error{Op: fmt.Sprintf("target date %q", s), Kind: ErrInvalidTargetDate, Err: err}
	}
	return lv, nil
}

// ValidateTargetDate reports whether s is a target date Infrahub reads as meant.
func ValidateTargetDate(s string) error {
	_, err := NormalizeTargetDate(s)
	return err
}

// ResolveTargetDate returns the instant a valid target date denotes, relative
// to now; the zero time stands for "current state".
func ResolveTargetDate(s string, now time.Time) (time.Time, error) {
	v, err := NormalizeTargetDate(s)
	if err != nil || v == "" {
		return time.Time{}, err
	}
	if t, ok := parseAbsolute(v); ok {
		return t, nil
	}
	d, err := relativeOffset(v)
	if err != nil {
		return time.Time{}, err
	}
	return now.Add(-d), nil
}

func parseAbsolute(v string) (time.Time, bool) {
	for _, layout := range absoluteLayouts {
		if t, err := time.Parse(layout, v); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// relativeOffset parses the accepted relative forms and explains the others.
func relativeOffset(v string) (time.Duration, error) {
	if m := relativeRE.FindStringSubmatch(v); m != nil && (m[1] != "" || m[2] != "" || m[3] != "") {
		var total time.Duration
		for i, unit := range []time.Duration{time.Hour, time.Minute, time.Second} {
			if m[i+1] == "" {
				continue
			}
			n, err := strconv.ParseInt(m[i+1], 10, 64)
			if err != nil || n > int64(math.MaxInt64/unit) || total > math.MaxInt64-time.Duration(n)*unit {
				return 0, errors.New("offset too large")
			}
			total += time.Duration(n) * unit
		}
		return total, nil
	}
	if len(v) == len("2006-01-02") {
		if _, err := time.Parse("2006-01-02", v); err == nil {
			return 0, fmt.Errorf("a date without a time is read by Infrahub as 12:00 UTC; give a full timestamp such as %sT00:00:00Z", v)
		}
	}
	if m := signedRE.FindStringSubmatch(v); m != nil {
		rest := strings.TrimSpace(m[2])
		if d := dayWeekRE.FindStringSubmatch(rest); d != nil {
			n, _ := strconv.Atoi(d[1])
			hours := n * 24
			if strings.HasPrefix(d[2], "w") {
				hours *= 7
			}
			return 0, fmt.Errorf("Infrahub does not understand day or week units; use hours, e.g. now-%dh", hours)
		}
		if m[1] == "+" {
			return 0, fmt.Errorf("Infrahub reads now+%s as %s in the past, and the future holds no data; use now-%s or an absolute timestamp", rest, rest, rest)
		}
		return 0, errors.New("relative dates must be now-<N><unit> with unit h, m or s (compound in that order, e.g. now-1h30m)")
	}
	if bareRE.MatchString(v) {
		return 0, fmt.Errorf("write relative dates as now-<N><unit>, e.g. now-%s", strings.TrimLeft(v, "+-"))
	}
	return 0, errors.New("expected an RFC 3339 timestamp (e.g. 2025-04-09T00:00:00Z) or a relative time now-<N><unit> with unit h, m or s")
}
