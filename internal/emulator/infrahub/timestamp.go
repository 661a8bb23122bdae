package infrahub

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// Infrahub's `at` parser, reproduced with its quirks because clients must be
// tested against them: ISO 8601 first (a bare date means 12:00 UTC, a missing
// zone means UTC); otherwise it searches the string for <N>s, <N>m and <N>h
// anywhere and subtracts them from now whatever the sign, so "now+2h" is two
// hours ago, "now-1d2h" is two hours ago, and "now-2d" is an error.
var relativeUnits = []struct {
	re   *regexp.Regexp
	unit time.Duration
}{
	{regexp.MustCompile(`(\d+)(s|sec|second|seconds)`), time.Second},
	{regexp.MustCompile(`(\d+)(m|min|minute|minutes)`), time.Minute},
	{regexp.MustCompile(`(\d+)(h|hour|hours)`), time.Hour},
}

var isoLayouts = []struct {
	layout string
	noon   bool
}{
	{time.RFC3339Nano, false},
	{"2006-01-02T15:04:05.999999999", false},
	{"2006-01-02T15:04", false},
	{"2006-01-02", true},
}

// ParseAt resolves an `at` query parameter as Infrahub would; "" is now.
func ParseAt(value string, now time.Time) (time.Time, error) {
	if value == "" {
		return now, nil
	}
	for _, l := range isoLayouts {
		if t, err := time.Parse(l.layout, value); err == nil {
			if l.noon {
				t = t.Add(12 * time.Hour)
			}
			return t.UTC(), nil
		}
	}
	var offset time.Duration
	found := false
	for _, u := range relativeUnits {
		m := u.re.FindStringSubmatch(value)
		if m == nil {
			continue
		}
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || n > int64(1<<62)/int64(u.unit) {
			return time.Time{}, fmt.Errorf("Invalid time format for %s", value)
		}
		offset += time.Duration(n) * u.unit
		found = true
	}
	if !found {
		return time.Time{}, fmt.Errorf("Invalid time format for %s", value)
	}
	return now.Add(-offset), nil
}
