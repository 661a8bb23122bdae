package telemetry

import (
	"strconv"
	"strings"
	"unicode"
)

// maxNameLen bounds a label value: BMCs' sensor names are short, a broken one need not be.
const maxNameLen = 64

// Normalize is a sensor name as a label value: lower snake case, words split at spaces,
// punctuation and camel case ("CPU1 Temp", "Cpu1Temp" and "CPU1.Temp" are all cpu1_temp), ASCII
// letters and digits only, at most 64 characters; "unnamed" for a name with none.
func Normalize(name string) string {
	rs := []rune(strings.TrimSpace(name))
	var b strings.Builder
	sep := true // the last rune written was a separator (or nothing yet)
	for i, r := range rs {
		switch {
		case r < unicode.MaxASCII && unicode.IsUpper(r):
			if !sep && i > 0 && startsWord(rs, i) {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
			sep = false
		case r < unicode.MaxASCII && (unicode.IsLower(r) || unicode.IsDigit(r)):
			b.WriteRune(r)
			sep = false
		default:
			if !sep {
				b.WriteByte('_')
				sep = true
			}
		}
	}
	out := strings.Trim(b.String(), "_")
	if len(out) > maxNameLen {
		out = strings.TrimRight(out[:maxNameLen], "_")
	}
	if out == "" {
		return "unnamed"
	}
	return out
}

// startsWord reports whether the upper-case rune at i begins a camel-case word: after a lower
// case letter (inletTemp), or after a capital or digit when a lower case letter follows
// (CPUTemp, CPU1Temp) — not inside an acronym (PSU) nor after a digit (Fan1A).
func startsWord(rs []rune, i int) bool {
	prev := rs[i-1]
	if unicode.IsLower(prev) {
		return true
	}
	return (unicode.IsUpper(prev) || unicode.IsDigit(prev)) && i+1 < len(rs) && unicode.IsLower(rs[i+1])
}

// uniqueNames normalises names, numbering the second and later of equal ones (_2, _3, ...):
// two sensors never share a series.
func uniqueNames(names []string) []string {
	out := make([]string, len(names))
	seen := map[string]int{}
	for i, n := range names {
		v := Normalize(n)
		seen[v]++
		if c := seen[v]; c > 1 {
			v += "_" + strconv.Itoa(c)
		}
		out[i] = v
	}
	return out
}
