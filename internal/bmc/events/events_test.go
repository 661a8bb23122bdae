package events

import (
	"fmt"
	"testing"
	"time"
)

func TestSubscriptionBodies(t *testing.T) {
	for _, tc := range []struct {
		name string
		info EventServiceInfo
		want []string
	}{
		{"current", EventServiceInfo{EventFormatTypes: []string{"Event"}}, []string{"EventFormatType", "EventFormatType+EventTypes"}},
		// iDRAC lists both: EventTypes first, with the format.
		{"formats and types", EventServiceInfo{EventFormatTypes: []string{"Event", "MetricReport"}, EventTypes: []string{"Alert", "MetricReport"}}, []string{"EventFormatType+EventTypes", "EventFormatType"}},
		{"older: types only", EventServiceInfo{EventTypes: []string{"Alert", "StatusChange"}}, []string{"EventTypes", "EventFormatType"}},
		{"says nothing", EventServiceInfo{}, []string{"EventTypes", "EventFormatType"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, b := range subscriptionBodies(tc.info, "https://192.0.2.1/events", "ctx") {
				if b["Destination"] != "https://192.0.2.1/events" || b["Protocol"] != "Redfish" || b["Context"] != "ctx" {
					t.Fatalf("body %v", b)
				}
				var form []string
				if b["EventFormatType"] == "Event" {
					form = append(form, "EventFormatType")
				}
				if _, ok := b["EventTypes"]; ok {
					form = append(form, "EventTypes")
				}
				got = append(got, fmt.Sprint(joinPlus(form)))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("forms %v, want %v", got, tc.want)
			}
		})
	}
}

func joinPlus(s []string) string {
	out := ""
	for i, v := range s {
		if i > 0 {
			out += "+"
		}
		out += v
	}
	return out
}

func TestParseEvent(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    string
		context string
		want    []EventRecord
		err     bool
	}{
		{
			name: "dell iDRAC 9",
			body: `{"@odata.context":"/redfish/v1/$metadata#Event.Event","@odata.id":"/redfish/v1/EventService/Events/5e004f5a","@odata.type":"#Event.v1_4_0.Event",
				"Context":"metalhub/r650-01","Description":"iDRAC Event","Id":"5e004f5a","Name":"Event Array",
				"Events":[{"EventId":"2162","EventTimestamp":"2021-07-13T15:07:59-05:00","EventType":"Alert","MemberId":"7e675c8e",
				"Message":"The system inlet temperature is greater than the upper warning threshold.","MessageArgs":["System Board Inlet Temp"],
				"MessageArgs@odata.count":1,"MessageId":"TMP0118","OriginOfCondition":{"@odata.id":"/redfish/v1/Chassis/System.Embedded.1"},"Severity":"Warning"}]}`,
			context: "metalhub/r650-01",
			want: []EventRecord{{EventID: "2162", EventType: "Alert", EventTimestamp: time.Date(2021, 7, 13, 20, 7, 59, 0, time.UTC), Severity: "Warning",
				Message: "The system inlet temperature is greater than the upper warning threshold.", MessageID: "TMP0118",
				MessageArgs: []string{"System Board Inlet Temp"}, Origin: "/redfish/v1/Chassis/System.Embedded.1"}},
		},
		{
			name: "hpe iLO 5, Context on the record",
			body: `{"@odata.context":"/redfish/v1/$metadata#Event.Event","@odata.type":"#Event.v1_0_0.Event","Id":"1","Name":"Events",
				"Events":[{"Context":"metalhub/dl360-07","EventId":"c6a1a1e4","EventTimestamp":"2019-05-14T18:35:10Z","EventType":"Alert",
				"Message":"The server is powered off.","MessageArgs":[],"MessageId":"iLOEvents.2.1.ServerPoweredOff",
				"OriginOfCondition":{"@odata.id":"/redfish/v1/Systems/1/"},"Severity":"Critical"}]}`,
			context: "metalhub/dl360-07",
			want: []EventRecord{{EventID: "c6a1a1e4", EventType: "Alert", EventTimestamp: time.Date(2019, 5, 14, 18, 35, 10, 0, time.UTC), Severity: "Critical",
				Message: "The server is powered off.", MessageID: "iLOEvents.2.1.ServerPoweredOff", Origin: "/redfish/v1/Systems/1/"}},
		},
		{
			name: "hpe iLO 4: EventID, MessageID, origin as a string, number Id",
			body: `{"Type":"Event.1.0.0","Id":7,"Events":[{"EventID":"9","EventType":"Alert","EventTimestamp":"2017-02-01T10:00:00Z",
				"Message":"Power Supply 2 failed.","MessageID":"iLOEvents.0.9.PowerSupplyFailed","OriginOfCondition":"/rest/v1/Chassis/1/Power","Severity":"Critical"}]}`,
			want: []EventRecord{{EventID: "9", EventType: "Alert", EventTimestamp: time.Date(2017, 2, 1, 10, 0, 0, 0, time.UTC), Severity: "Critical",
				Message: "Power Supply 2 failed.", MessageID: "iLOEvents.0.9.PowerSupplyFailed", Origin: "/rest/v1/Chassis/1/Power"}},
		},
		{
			name: "generic (OpenBMC): MessageSeverity only, two records",
			body: `{"@odata.type":"#Event.v1_7_0.Event","Id":"42","Name":"Event Log","Context":"c",
				"Events":[{"EventId":"1","EventTimestamp":"2024-01-01T00:00:00+00:00","EventType":"Event","MemberId":"0","Message":"PSU0 failed.",
				"MessageId":"OpenBMC.0.1.PowerSupplyFailed","MessageSeverity":"Critical","OriginOfCondition":{"@odata.id":"/redfish/v1/Chassis/chassis/PowerSubsystem/PowerSupplies/powersupply0"}},
				{"EventId":"2","EventTimestamp":"2024-01-01T00:01:00+00:00","MessageId":"OpenBMC.0.1.PowerSupplyFailureRecovered","MessageSeverity":"OK","Message":"PSU0 recovered."}]}`,
			context: "c",
			want: []EventRecord{
				{EventID: "1", EventType: "Event", EventTimestamp: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), Severity: "Critical", Message: "PSU0 failed.",
					MessageID: "OpenBMC.0.1.PowerSupplyFailed", Origin: "/redfish/v1/Chassis/chassis/PowerSubsystem/PowerSupplies/powersupply0"},
				{EventID: "2", EventTimestamp: time.Date(2024, 1, 1, 0, 1, 0, 0, time.UTC), Severity: "OK", Message: "PSU0 recovered.", MessageID: "OpenBMC.0.1.PowerSupplyFailureRecovered"},
			},
		},
		{
			name:    "MessageSeverity wins over Severity",
			body:    `{"Context":"c","Events":[{"EventId":"1","Severity":"OK","MessageSeverity":"Warning","LogEntry":{"@odata.id":"/redfish/v1/Systems/1/LogServices/SEL/Entries/9"}}]}`,
			context: "c",
			want:    []EventRecord{{EventID: "1", Severity: "Warning", LogEntry: "/redfish/v1/Systems/1/LogServices/SEL/Entries/9"}},
		},
		{name: "no records", body: `{"Context":"c","Events":[]}`, context: "c", want: []EventRecord{}},
		{name: "not JSON", body: `Power supply failed`, err: true},
		{name: "not an event", body: `{"@odata.type":"#MetricReport.v1_4_0.MetricReport","MetricValues":[]}`, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := ParseEvent([]byte(tc.body))
			if tc.err {
				if err == nil {
					t.Fatalf("parsed %+v, want an error", ev)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ev.Context != tc.context {
				t.Errorf("context %q, want %q", ev.Context, tc.context)
			}
			if fmt.Sprintf("%+v", ev.Events) != fmt.Sprintf("%+v", tc.want) {
				t.Errorf("events\n%+v\nwant\n%+v", ev.Events, tc.want)
			}
		})
	}
}
