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
		{"NVMe: format after sanitize", Capabilities{Block: true, Discard: true, ZeroOut: true, NVMeCryptoErase: true, NVMeBlockErase: true,
			NVMeFormatCryptoErase: true, NVMeFormatUserDataErase: true},
			[]Method{MethodNVMeCryptoErase, MethodNVMeBlockErase, MethodNVMeFormatCryptoErase, MethodNVMeFormatUserDataErase,
				MethodDiscard, MethodZeroOut, MethodOverwrite}},
		{"NVMe: format only", Capabilities{Block: true, ZeroOut: true, NVMeFormatUserDataErase: true},
			[]Method{MethodNVMeFormatUserDataErase, MethodZeroOut, MethodOverwrite}},
		{"SATA: security erase, enhanced first", Capabilities{Block: true, Discard: true, ZeroOut: true, ATASecurityEraseEnhanced: true, ATASecurityErase: true},
			[]Method{MethodATASecurityEraseEnhanced, MethodATASecurityErase, MethodDiscard, MethodZeroOut, MethodOverwrite}},
		{"SATA: no security erase where SANITIZE is", Capabilities{Block: true, ZeroOut: true, ATABlockErase: true, ATASecurityEraseEnhanced: true, ATASecurityErase: true},
			[]Method{MethodATABlockErase, MethodZeroOut, MethodOverwrite}},
	} {
		if got := Plan(tc.c); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Plan = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// What a drive erases itself reads back as the drive likes: only a change is proven. The
// kernel's zero-out and the overwrite must read back zeros.
func TestChangesOnly(t *testing.T) {
	for _, m := range []Method{MethodNVMeCryptoErase, MethodNVMeBlockErase, MethodNVMeFormatCryptoErase, MethodNVMeFormatUserDataErase,
		MethodSCSICryptoErase, MethodSCSIBlockErase, MethodATACryptoScramble, MethodATABlockErase, MethodATASecurityEraseEnhanced,
		MethodATASecurityErase, MethodDiscard} {
		if !changesOnly(m) {
			t.Errorf("%s is checked for zeros", m)
		}
	}
	for _, m := range []Method{MethodZeroOut, MethodOverwrite, MethodMetadata} {
		if changesOnly(m) {
			t.Errorf("%s is not checked for zeros", m)
		}
	}
}

// The values are what proofs report, stored and compared by the controller: they never change.
func TestMethodValues(t *testing.T) {
	for m, want := range map[Method]string{MethodNVMeFormatCryptoErase: "NVMeFormatCryptoErase", MethodNVMeFormatUserDataErase: "NVMeFormatUserDataErase",
		MethodATASecurityEraseEnhanced: "ATASecurityEraseEnhanced", MethodATASecurityErase: "ATASecurityErase"} {
		if string(m) != want {
			t.Errorf("%s, want %s", m, want)
		}
	}
}
