package manager

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
)

func TestFamiliesFlag(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{in: "metal", want: []string{"metal"}},
		{in: "delivery", want: []string{"delivery"}},
		{in: "metal,delivery", want: []string{"delivery", "metal"}},
		{in: " delivery , metal,metal", want: []string{"delivery", "metal"}},
		{in: "both", want: []string{"delivery", "metal"}},
		{in: "all", want: []string{"delivery", "metal"}},
		{in: "metal,bogus", wantErr: `unknown controller family "bogus"`},
		{in: "", wantErr: "no controller family selected"},
		{in: ",", wantErr: "no controller family selected"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			o := DefaultOptions()
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o.BindFlags(fs)
			err := fs.Parse([]string{"--controllers=" + tc.in})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(o.Controllers, tc.want) {
				t.Fatalf("got %v, want %v", o.Controllers, tc.want)
			}
		})
	}
}

func TestDefaultsRunBothFamilies(t *testing.T) {
	o := DefaultOptions()
	if !o.Controllers.Has(FamilyMetal) || !o.Controllers.Has(FamilyDelivery) {
		t.Fatalf("default families = %v", o.Controllers)
	}
}
