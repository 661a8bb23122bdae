package netboot

import (
	"encoding/json"
	"net/http"
	"strings"
)

// Pulled is hardware a technician took out of a machine: the last GPUs, NICs and disks of what
// HardwareFor gives it. It lasts for the Netboot's life and applies from the machine's next boot.
type Pulled struct {
	GPUs  int `json:"gpus,omitempty"`
	NICs  int `json:"nics,omitempty"`
	Disks int `json:"disks,omitempty"`
}

// Pull takes hardware out of the machine with the system UUID; a later Pull replaces it (zero
// puts everything back).
func (n *Netboot) Pull(uuid string, p Pulled) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pulled == nil {
		n.pulled = map[string]Pulled{}
	}
	n.pulled[strings.ToLower(uuid)] = p
}

// apply takes out what was pulled; the PXE NIC (the first) always stays.
func (p Pulled) apply(h Hardware) Hardware {
	cut := func(n, k, keep int) int { return max(keep, n-k) }
	h.GPUs = h.GPUs[:cut(len(h.GPUs), p.GPUs, 0)]
	h.NICs = h.NICs[:cut(len(h.NICs), p.NICs, min(1, len(h.NICs)))]
	h.Disks = h.Disks[:cut(len(h.Disks), p.Disks, 0)]
	return h
}

func (n *Netboot) hardware(uuid, serial string, macs []string) Hardware {
	h := HardwareFor(uuid, serial, macs)
	n.mu.Lock()
	p := n.pulled[strings.ToLower(uuid)]
	n.mu.Unlock()
	return p.apply(h)
}

// ControlHandler lets tests and `metalhub dev` take hardware out of machines:
// PUT /emulator/machines/{uuid}/pulled with a Pulled (e.g. {"gpus":1}), GET to read it back.
func (n *Netboot) ControlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /emulator/machines/{uuid}/pulled", func(w http.ResponseWriter, r *http.Request) {
		n.mu.Lock()
		p := n.pulled[strings.ToLower(r.PathValue("uuid"))]
		n.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(p)
	})
	mux.HandleFunc("PUT /emulator/machines/{uuid}/pulled", func(w http.ResponseWriter, r *http.Request) {
		var p Pulled
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil || p.GPUs < 0 || p.NICs < 0 || p.Disks < 0 {
			http.Error(w, `body must be {"gpus":N,"nics":N,"disks":N}, N >= 0`, http.StatusBadRequest)
			return
		}
		n.Pull(r.PathValue("uuid"), p)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(p)
	})
	return mux
}
