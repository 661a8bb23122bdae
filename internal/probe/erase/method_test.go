package erase

import (
	"slices"
	"testing"
)

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Capabilities
		want []Method
	}{
		{"SSD", Capabilities{Block: true, Discard: true, ZeroOut: true}, []Method{MethodDiscard, MethodZeroOut, MethodOverwrite}},
		{"NVMe with sanitize", Capabilities{Block: true, Discard: true, ZeroOut: true, NVMeCryptoErase: true, NVMeBlockErase: true},
			[]Method{MethodNVMeCryptoErase, MethodNVMeBlockErase, MethodDiscard, MethodZeroOut, MethodOverwrite}},
		{"spinning disk", Capabilities{Block: true, ZeroOut: true}, []Method{MethodZeroOut, MethodOverwrite}},
		{"file that punches holes", Capabilities{Discard: true}, []Method{MethodDiscard, MethodOverwrite}},
		{"file on a filesystem without holes", Capabilities{}, []Method{MethodOverwrite}},
		{"zero-out without a block device is not the kernel's", Capabilities{ZeroOut: true}, []Method{MethodOverwrite}},
	} {
		if got := Plan(tc.c); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Plan = %v, want %v", tc.name, got, tc.want)
		}
	}
}
