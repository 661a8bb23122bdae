package update

import "testing"

func TestVersionOf(t *testing.T) {
	for _, tc := range []struct{ uri, want string }{
		{"http://images/bios-2.3.4.bin", "2.3.4"},
		{"http://images/bmc-7.10.30.00.d9?sig=abc", "7.10.30.00"},
		{"firmware-1.2.fwpkg", "1.2"},
		{"http://images/plain.img", "plain"},
		{"http://images/trailing-.bin", "trailing-"},
	} {
		if got := VersionOf(tc.uri); got != tc.want {
			t.Errorf("VersionOf(%q) = %q, want %q", tc.uri, got, tc.want)
		}
	}
}
