package erase

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"
)

// SampleBytes is the size of one block read back.
const SampleBytes = 4096

// DefaultSamples is how many blocks a read-back samples besides each end's first and last.
const DefaultSamples = 256

// Proof is what one disk's sanitization shows: how, when, and what its read-back found.
type Proof struct {
	Device    string    `json:"device"`
	Serial    string    `json:"serial,omitempty"`
	Model     string    `json:"model,omitempty"`
	SizeBytes int64     `json:"sizeBytes"`
	Method    Method    `json:"method"`
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	// Verified: every sampled block holds what Method leaves.
	Verified bool `json:"verified"`
	// Samples is how many blocks were read back.
	Samples int `json:"samples"`
	// Tried are methods that failed or whose read-back did not hold before Method, with why.
	Tried []string `json:"tried,omitempty"`
	// Failure says why the disk is not proven erased ("" when Verified).
	Failure string `json:"failure,omitempty"`
}

// Options tune one sanitization.
type Options struct {
	// Samples is how many blocks the read-back samples besides the fixed ones (0: DefaultSamples).
	Samples int
	// Methods overrides the plan (tests, or a policy narrowing it); MethodMetadata alone makes a
	// metadata wipe.
	Methods []Method
	// Now is the clock.
	Now func() time.Time
}

// Sanitize erases d by the first method of its plan whose read-back holds, and says so in the
// proof. An error means the device could not be read or written at all; a proof that is not
// Verified names what did not hold.
func Sanitize(ctx context.Context, d *Device, o Options) (Proof, error) {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	methods := o.Methods
	if len(methods) == 0 {
		methods = Plan(d.Caps)
	}
	p := Proof{Device: d.Path, SizeBytes: d.Size, Start: now()}
	for _, m := range methods {
		offsets, err := sampleOffsets(d.Size, cmp.Or(max(o.Samples, 0), DefaultSamples), m)
		if err != nil {
			return p, err
		}
		p.Method, p.Samples = m, len(offsets)
		if err := d.ready(m); err != nil {
			p.Tried = append(p.Tried, fmt.Sprintf("%s: %v", m, err))
			continue
		}
		before, err := d.fingerprint(offsets)
		if err != nil {
			return p, err
		}
		if err := d.Erase(ctx, m); err != nil {
			if ctx.Err() != nil {
				return p, err
			}
			p.Tried = append(p.Tried, fmt.Sprintf("%s: %v", m, err))
			continue
		}
		bad, err := d.verify(m, offsets, before)
		if err != nil {
			return p, err
		}
		if bad == "" {
			p.Verified, p.Failure, p.End = true, "", now()
			return p, nil
		}
		p.Failure = bad
		p.Tried = append(p.Tried, fmt.Sprintf("%s: %s", m, bad))
	}
	p.End = now()
	if p.Failure == "" {
		p.Failure = "no method erased the device"
	}
	return p, nil
}

// sampleOffsets are the blocks a read-back reads: the first and last of each region the method
// erases, n spread evenly over them and n more at random (so a device that erases only where a
// verifier is known to look is caught), sorted and without repeats.
func sampleOffsets(size int64, n int, m Method) ([]int64, error) {
	regions := []region{{0, size}}
	if m == MethodMetadata {
		regions = metadataRegions(size)
	}
	var out []int64
	for _, r := range regions {
		blocks := r.len / SampleBytes
		if blocks == 0 {
			continue
		}
		at := func(b int64) int64 { return r.off + b*SampleBytes }
		out = append(out, at(0), at(blocks-1))
		share := int64(max(n/len(regions), 1))
		for k := range share {
			out = append(out, at(k*blocks/share))
			b, err := rand.Int(rand.Reader, big.NewInt(blocks))
			if err != nil {
				return nil, fmt.Errorf("sampling: %w", err)
			}
			out = append(out, at(b.Int64()))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// fingerprint hashes the sampled blocks as they are before erasing (nil for an all-zero
// block: zeros afterwards prove nothing about it, and need not).
func (d *Device) fingerprint(offsets []int64) ([][]byte, error) {
	out := make([][]byte, len(offsets))
	buf := make([]byte, SampleBytes)
	for i, off := range offsets {
		if err := d.readBlock(buf, off); err != nil {
			return nil, err
		}
		if !allZero(buf) {
			sum := sha256.Sum256(buf)
			out[i] = sum[:]
		}
	}
	return out, nil
}

// changesOnly reports the methods after which a drive answers what it likes (zeros, ones or
// noise): their read-back proves only that no sampled block holds what it held. A format's
// secure erase leaves what the controller chooses; an enhanced security erase leaves a vendor
// pattern, and a normal one, zeros by ACS, is on many SSDs their block erase, which reads
// back ones or noise: a zero check would throw away an erase that worked.
func changesOnly(m Method) bool {
	switch m {
	case MethodDiscard, MethodNVMeCryptoErase, MethodNVMeBlockErase, MethodSCSICryptoErase, MethodSCSIBlockErase,
		MethodATACryptoScramble, MethodATABlockErase, MethodNVMeFormatCryptoErase, MethodNVMeFormatUserDataErase,
		MethodATASecurityEraseEnhanced, MethodATASecurityErase:
		return true
	}
	return false
}

// verify reads the sampled blocks back: after a discard or a drive's sanitize each must no
// longer hold what it held; after any other method each must be zeros. It says what did not
// hold, or "".
func (d *Device) verify(m Method, offsets []int64, before [][]byte) (string, error) {
	buf := make([]byte, SampleBytes)
	var kept []int64
	for i, off := range offsets {
		if err := d.readBlock(buf, off); err != nil {
			return "", err
		}
		if changesOnly(m) {
			if sum := sha256.Sum256(buf); before[i] != nil && bytes.Equal(sum[:], before[i]) {
				kept = append(kept, off)
			}
			continue
		}
		if !allZero(buf) {
			kept = append(kept, off)
		}
	}
	if len(kept) == 0 {
		return "", nil
	}
	what := "not zero"
	if changesOnly(m) {
		what = "unchanged"
	}
	return fmt.Sprintf("%d of %d sampled blocks %s after %s (first at byte %d)", len(kept), len(offsets), what, m, kept[0]), nil
}

func (d *Device) readBlock(buf []byte, off int64) error {
	n, err := d.file.ReadAt(buf, off)
	if n == len(buf) {
		return nil
	}
	if err == nil {
		err = errors.New("short read")
	}
	return fmt.Errorf("reading %s at %d: %w", d.Path, off, err)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
