// Package media is one emulated system's virtual media: its devices (from the vendor profile),
// served as a VirtualMedia collection under the system or its manager, with the InsertMedia and
// EjectMedia actions.
//
// The devices are the system's state, under the system's lock: what it needs of its system
// comes through Host; it must not import the emulator package.
package media
