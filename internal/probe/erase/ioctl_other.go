//go:build !linux

package erase

import "os"

// Erasing is Linux's business (the cleaning agent runs the discovery image); elsewhere only a
// file can be overwritten, which keeps the package buildable for the CLI.

func openExclusive(path string, _ bool) (*os.File, error) { return os.OpenFile(path, os.O_RDWR, 0) }

func capabilities(d *Device) Capabilities { return Capabilities{Block: d.block} }

func (d *Device) discard(int64, int64) error { return ErrUnsupported }

func (d *Device) zeroOut(int64, int64) error { return ErrUnsupported }

func dropCache(*Device) {}
