package redfish

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
	"github.com/metalhub/metalhub/internal/emulator/redfish/sel"
)

// BMCInfo describes one BMC on the control API and in the command output.
type BMCInfo struct {
	Index     int      `json:"index"`
	URL       string   `json:"url"`
	Username  string   `json:"username"`
	Password  string   `json:"password"`
	Vendor    string   `json:"vendor"`
	SystemIDs []string `json:"systemIds"`
}

// Info describes the BMC for listings.
func (b *BMC) Info() BMCInfo {
	u, p := b.Credentials()
	return BMCInfo{Index: b.index, URL: b.url, Username: u, Password: p, Vendor: b.profile.Name, SystemIDs: b.SystemIDs()}
}

// SystemState is a system's mutable state on the control API.
type SystemState struct {
	ID           string       `json:"id"`
	UUID         string       `json:"uuid"`
	SerialNumber string       `json:"serialNumber"`
	PowerState   string       `json:"powerState"`
	Boot         BootOverride `json:"boot"`
	MACs         []string     `json:"macs"`
	// Health is Status.Health: OK, Warning or Critical, as the SEL left it.
	Health string `json:"health"`
}

// State snapshots the system for the control API.
func (s *System) State() SystemState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SystemState{ID: s.hw.ID, UUID: s.hw.UUID, SerialNumber: s.hw.Serial, PowerState: s.power, Boot: s.boot, MACs: s.MACs(), Health: s.sel.Health()}
}

// ControlHandler serves the emulator's control API, meant for a separate
// listener so tests and scripts outside the process can steer and observe:
//
//	GET    /emulator/bmcs                              list BMCs
//	GET    /emulator/records[?bmc=i]                   recorded power/boot actions
//	DELETE /emulator/records                           clear them
//	GET|PUT|DELETE /emulator/bmcs/{i}/faults           read, set, clear faults
//	GET|DELETE /emulator/bmcs/{i}/stats                read, reset counters
//	POST   /emulator/bmcs/{i}/expire-sessions          delete all sessions
//	GET    /emulator/bmcs/{i}/systems/{id}             system state
//	PUT    /emulator/bmcs/{i}/systems/{id}/power       {"powerState":"On"} at once
//	GET    /emulator/bmcs/{i}/systems/{id}/log         the system's SEL, oldest first
//	POST   /emulator/bmcs/{i}/systems/{id}/log         log an entry (LogEntry; events follow):
//	       {"severity":"Critical","message":"Correctable ECC limit reached.","sensorType":"Memory",
//	        "entryCode":"Assert","origin":"/redfish/v1/Systems/1/Memory/DIMM0"} -> 201, the entry
//	DELETE /emulator/bmcs/{i}/systems/{id}/log         clear it (health back to OK)
//	GET    /emulator/bmcs/{i}/subscriptions            event subscriptions
//	GET    /emulator/bmcs/{i}/deliveries               what became of the events sent
//	GET    /emulator/bmcs/{i}/certificate              the HTTPS certificate served, one staged, a pending CSR key
//	GET    /emulator/bmcs/{i}/systems/{id}/sensors     failed parts and the readings now
//	PUT    /emulator/bmcs/{i}/systems/{id}/sensors     fail parts (SensorFaults):
//	       {"failedPsus":["PSU2"],"stoppedFans":["Fan3"],"memoryHealth":"Critical"}; {} repairs all
func (e *Emulator) ControlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /emulator/bmcs", func(w http.ResponseWriter, r *http.Request) {
		out := make([]BMCInfo, len(e.bmcs))
		for i, b := range e.bmcs {
			out[i] = b.Info()
		}
		rfhttp.WriteJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /emulator/records", func(w http.ResponseWriter, r *http.Request) {
		recs := e.Records()
		if q := r.URL.Query().Get("bmc"); q != "" {
			i, err := strconv.Atoi(q)
			if err != nil {
				http.Error(w, "bmc must be an index", http.StatusBadRequest)
				return
			}
			filtered := recs[:0]
			for _, rec := range recs {
				if rec.BMC == i {
					filtered = append(filtered, rec)
				}
			}
			recs = filtered
		}
		if recs == nil {
			recs = []Record{}
		}
		rfhttp.WriteJSON(w, http.StatusOK, recs)
	})
	mux.HandleFunc("DELETE /emulator/records", func(w http.ResponseWriter, r *http.Request) {
		e.ClearRecords()
		w.WriteHeader(http.StatusNoContent)
	})
	withBMC := func(h func(http.ResponseWriter, *http.Request, *BMC)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			i, err := strconv.Atoi(r.PathValue("i"))
			b := e.BMC(i)
			if err != nil || b == nil {
				http.Error(w, "no such BMC", http.StatusNotFound)
				return
			}
			h(w, r, b)
		}
	}
	mux.HandleFunc("GET /emulator/bmcs/{i}/faults", withBMC(func(w http.ResponseWriter, r *http.Request, b *BMC) {
		rfhttp.WriteJSON(w, http.StatusOK, b.Faults())
	}))
	mux.HandleFunc("PUT /emulator/bmcs/{i}/faults", withBMC(func(w http.ResponseWriter, r *http.Request, b *BMC) {
		var f Faults
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			http.Error(w, "invalid faults: "+err.Error(), http.StatusBadRequest)
			return
		}
		b.SetFaults(f)
		rfhttp.WriteJSON(w, http.StatusOK, f)
	}))
	mux.HandleFunc("DELETE /emulator/bmcs/{i}/faults", withBMC(func(w http.ResponseWriter, r *http.Request, b *BMC) {
		b.ClearFaults()
		w.WriteHeader(http.StatusNoContent)
	}))
	mux.HandleFunc("GET /emulator/bmcs/{i}/stats", withBMC(func(w http.ResponseWriter, r *http.Request, b *BMC) {
		rfhttp.WriteJSON(w, http.StatusOK, b.Stats())
	}))
	mux.HandleFunc("DELETE /emulator/bmcs/{i}/stats", withBMC(func(w http.ResponseWriter, r *http.Request, b *BMC) {
		b.ResetStats()
		w.WriteHeader(http.StatusNoContent)
	}))
	mux.HandleFunc("POST /emulator/bmcs/{i}/expire-sessions", withBMC(func(w http.ResponseWriter, r *http.Request, b *BMC) {
		rfhttp.WriteJSON(w, http.StatusOK, map[string]int{"expired": b.ExpireSessions()})
	}))
	withSystem := func(h func(http.ResponseWriter, *http.Request, *System)) http.HandlerFunc {
		return withBMC(func(w http.ResponseWriter, r *http.Request, b *BMC) {
			s := b.System(r.PathValue("id"))
			if s == nil {
				http.Error(w, "no such system", http.StatusNotFound)
				return
			}
			h(w, r, s)
		})
	}
	mux.HandleFunc("GET /emulator/bmcs/{i}/systems/{id}", withSystem(func(w http.ResponseWriter, r *http.Request, s *System) {
		rfhttp.WriteJSON(w, http.StatusOK, s.State())
	}))
	mux.HandleFunc("PUT /emulator/bmcs/{i}/systems/{id}/power", withSystem(func(w http.ResponseWriter, r *http.Request, s *System) {
		var req struct {
			PowerState string `json:"powerState"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || (req.PowerState != PowerOn && req.PowerState != PowerOff) {
			http.Error(w, `body must be {"powerState":"On"|"Off"}`, http.StatusBadRequest)
			return
		}
		s.SetPowerState(req.PowerState)
		rfhttp.WriteJSON(w, http.StatusOK, s.State())
	}))
	mux.HandleFunc("GET /emulator/bmcs/{i}/systems/{id}/log", withSystem(func(w http.ResponseWriter, r *http.Request, s *System) {
		rfhttp.WriteJSON(w, http.StatusOK, rfhttp.NonNil(s.LogEntries()))
	}))
	mux.HandleFunc("POST /emulator/bmcs/{i}/systems/{id}/log", withSystem(func(w http.ResponseWriter, r *http.Request, s *System) {
		e, err := sel.DecodeEntry(r)
		if err != nil {
			http.Error(w, "invalid log entry: "+err.Error(), http.StatusBadRequest)
			return
		}
		rfhttp.WriteJSON(w, http.StatusCreated, s.InjectLogEntry(e))
	}))
	mux.HandleFunc("DELETE /emulator/bmcs/{i}/systems/{id}/log", withSystem(func(w http.ResponseWriter, r *http.Request, s *System) {
		s.ClearLog()
		w.WriteHeader(http.StatusNoContent)
	}))
	mux.HandleFunc("GET /emulator/bmcs/{i}/subscriptions", withBMC(func(w http.ResponseWriter, r *http.Request, b *BMC) {
		rfhttp.WriteJSON(w, http.StatusOK, rfhttp.NonNil(b.Subscriptions()))
	}))
	mux.HandleFunc("GET /emulator/bmcs/{i}/deliveries", withBMC(func(w http.ResponseWriter, r *http.Request, b *BMC) {
		rfhttp.WriteJSON(w, http.StatusOK, rfhttp.NonNil(b.Deliveries()))
	}))
	mux.HandleFunc("GET /emulator/bmcs/{i}/certificate", withBMC(func(w http.ResponseWriter, r *http.Request, b *BMC) {
		rfhttp.WriteJSON(w, http.StatusOK, b.CertificateState())
	}))
	mux.HandleFunc("GET /emulator/bmcs/{i}/systems/{id}/sensors", withSystem(func(w http.ResponseWriter, r *http.Request, s *System) {
		rfhttp.WriteJSON(w, http.StatusOK, sensorState{Faults: s.SensorFaults(), Readings: s.Sensors(time.Now())})
	}))
	mux.HandleFunc("PUT /emulator/bmcs/{i}/systems/{id}/sensors", withSystem(func(w http.ResponseWriter, r *http.Request, s *System) {
		var f SensorFaults
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			http.Error(w, "invalid sensor faults: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := s.SetSensorFaults(f); err != nil {
			http.Error(w, "invalid sensor faults: "+err.Error(), http.StatusBadRequest)
			return
		}
		rfhttp.WriteJSON(w, http.StatusOK, sensorState{Faults: s.SensorFaults(), Readings: s.Sensors(time.Now())})
	}))
	return mux
}

// sensorState is a system's sensors on the control API.
type sensorState struct {
	Faults   SensorFaults   `json:"faults"`
	Readings SensorSnapshot `json:"readings"`
}
