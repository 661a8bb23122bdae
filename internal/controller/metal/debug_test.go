package metal

import (
	"sort"
	"testing"

	eventsv1 "k8s.io/api/events/v1"
)

// dumpEvents logs the events of an object, for failing tests.
func dumpEvents(t *testing.T, name string) {
	list := &eventsv1.EventList{}
	if err := env.Client.List(ctx(), list); err != nil {
		return
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].EventTime.Before(&list.Items[j].EventTime) })
	for _, e := range list.Items {
		if e.Regarding.Name == name {
			t.Logf("%s %s %s: %s", e.EventTime.Format("15:04:05.000"), e.Reason, e.Action, e.Note)
		}
	}
}
