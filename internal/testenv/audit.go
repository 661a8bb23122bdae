package testenv

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"
)

// auditEvent is the part of an audit.k8s.io/v1 Event AuditWrites reads.
type auditEvent struct {
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	UserAgent  string `json:"userAgent"`
	ObjectRef  *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestObject  map[string]any `json:"requestObject"`
	StageTimestamp time.Time      `json:"stageTimestamp"`
}

// AuditWrites reads the API server's audit log (Env.AuditLog) and breaks the successful writes
// made between from and to down per n objects: by verb, resource, client and what each write
// changed (the top fields a patch sets; for an update, the fields that differ from the last
// body the log holds for the object), and events by reason. It says which writes a workload
// makes, which the request counters (APIWrites) do not.
func (e *Env) AuditWrites(from, to time.Time, n int) (string, error) {
	if e.AuditLog == "" {
		return "", fmt.Errorf("no audit log (set METALHUB_AUDIT_LOG)")
	}
	f, err := os.Open(e.AuditLog)
	if err != nil {
		return "", err
	}
	defer f.Close()
	last := map[string]map[string]any{} // resource/namespace/name -> last full body
	eventReason := map[string]string{}
	writes, reasons := map[string]int{}, map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var ev auditEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.ObjectRef == nil {
			continue
		}
		if ev.ResponseStatus == nil || ev.ResponseStatus.Code >= 300 {
			continue
		}
		ref := ev.ObjectRef
		name := ref.Name
		if name == "" && ev.RequestObject != nil {
			if md, ok := ev.RequestObject["metadata"].(map[string]any); ok {
				name, _ = md["name"].(string)
			}
		}
		key := ref.Resource + "/" + ref.Namespace + "/" + name
		var what string
		switch ev.Verb {
		case "patch":
			what = strings.Join(paths(ev.RequestObject, ""), " ")
		case "update", "create":
			prev := last[key]
			if ev.Verb == "update" && prev != nil {
				d := diff(prev, ev.RequestObject, "", ref.Subresource)
				what = strings.Join(d, " ")
				if what == "" {
					what = "(nothing)"
				}
			}
			if ev.RequestObject != nil {
				last[key] = ev.RequestObject
			}
		}
		inWindow := !ev.StageTimestamp.Before(from) && !ev.StageTimestamp.After(to)
		if ref.Resource == "events" {
			if ev.Verb == "create" && ev.RequestObject != nil {
				r, _ := ev.RequestObject["reason"].(string)
				eventReason[key] = r
			}
			if inWindow {
				reasons[ev.Verb+" "+eventReason[key]]++
			}
			what = ""
		}
		if !inWindow {
			continue
		}
		agent, _, _ := strings.Cut(ev.UserAgent, "/")
		res := ref.Resource
		if ref.Subresource != "" {
			res += "/" + ref.Subresource
		}
		row := fmt.Sprintf("%s %s by %s", ev.Verb, res, agent)
		if what != "" {
			row += ": " + what
		}
		writes[row]++
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "writes per object by verb, resource, client and fields changed:\n" + table(writes, n) +
		"events per object by verb and reason:\n" + table(reasons, n), nil
}

func table(m map[string]int, n int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %6.3f  %s\n", float64(m[k])/float64(n), k)
	}
	return b.String()
}

// paths lists what a merge patch sets: annotation and label keys, other fields two levels deep.
func paths(v any, prefix string) []string {
	m, ok := v.(map[string]any)
	if !ok || strings.Count(prefix, ".") >= 2 && !strings.HasSuffix(prefix, "annotations.") && !strings.HasSuffix(prefix, "labels.") {
		if prefix == "" {
			return nil
		}
		return []string{strings.TrimSuffix(prefix, ".")}
	}
	var out []string
	for k, sub := range m {
		if prefix == "" && (k == "apiVersion" || k == "kind") || k == "resourceVersion" {
			continue
		}
		out = append(out, paths(sub, prefix+k+".")...)
	}
	sort.Strings(out)
	return out
}

// diff lists the fields, two levels deep, that differ between two full bodies; a status update
// is compared on status alone.
func diff(a, b map[string]any, prefix, subresource string) []string {
	var out []string
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	for k := range keys {
		if prefix == "" && subresource == "status" && k != "status" {
			continue
		}
		if k == "resourceVersion" || k == "managedFields" || k == "generation" {
			continue
		}
		if reflect.DeepEqual(a[k], b[k]) {
			continue
		}
		am, aok := a[k].(map[string]any)
		bm, bok := b[k].(map[string]any)
		if aok && bok && strings.Count(prefix, ".") < 1 {
			out = append(out, diff(am, bm, prefix+k+".", subresource)...)
			continue
		}
		out = append(out, prefix+k)
	}
	sort.Strings(out)
	return out
}
