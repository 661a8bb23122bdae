package infrahub

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestNormalizeTargetDate(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr string // substring of the error; "" = valid
	}{
		{in: "", want: ""},
		{in: "now", want: ""},
		{in: " NOW ", want: ""},
		{in: "2025-04-09T00:00:00Z", want: "2025-04-09T00:00:00Z"},
		{in: "2025-04-09T02:00:00+02:00", want: "2025-04-09T00:00:00Z"},
		{in: "2025-04-09T00:00:00.5Z", want: "2025-04-09T00:00:00.5Z"},
		{in: "2025-04-09T00:00:00", want: "2025-04-09T00:00:00Z"},
		{in: "now-2h", want: "now-2h"},
		{in: "now-30m", want: "now-30m"},
		{in: "now-45s", want: "now-45s"},
		{in: "now-1h30m", want: "now-1h30m"},
		{in: "now-1h30m15s", want: "now-1h30m15s"},
		{in: "NOW-2H", want: "now-2h"},
		{in: "now-2d", wantErr: "now-48h"},
		{in: "now-1w", wantErr: "now-168h"},
		{in: "now-3days", wantErr: "now-72h"},
		{in: "now+2h", wantErr: "in the past"},
		{in: "now-30m1h", wantErr: "unit h, m or s"},
		{in: "now-1d2h", wantErr: "unit h, m or s"},
		{in: "now-", wantErr: "unit h, m or s"},
		{in: "now-h", wantErr: "unit h, m or s"},
		{in: "2h", wantErr: "now-2h"},
		{in: "-2h", wantErr: "now-2h"},
		{in: "2025-04-09", wantErr: "12:00 UTC"},
		{in: "yesterday", wantErr: "RFC 3339"},
		{in: "09/04/2025", wantErr: "RFC 3339"},
		{in: "now-99999999999999h", wantErr: "too large"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := NormalizeTargetDate(tc.in)
			if tc.wantErr == "" {
				if err != nil || got != tc.want {
					t.Fatalf("NormalizeTargetDate(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("NormalizeTargetDate(%q) = %q, want error containing %q", tc.in, got, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q does not contain %q", err, tc.wantErr)
			}
			if !errors.Is(err, ErrInvalidTargetDate) || Reason(err) != ReasonInvalidTargetDate {
				t.Errorf("error kind: Is=%v Reason=%q", errors.Is(err, ErrInvalidTargetDate), Reason(err))
			}
		})
	}
}

func TestResolveTargetDate(t *testing.T) {
	now := time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Time
	}{
		{"", time.Time{}},
		{"now-90m", now.Add(-90 * time.Minute)},
		{"now-1h30m", now.Add(-90 * time.Minute)},
		{"2025-04-09T00:00:00Z", time.Date(2025, 4, 9, 0, 0, 0, 0, time.UTC)},
	}
	for _, tc := range tests {
		got, err := ResolveTargetDate(tc.in, now)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("ResolveTargetDate(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}
