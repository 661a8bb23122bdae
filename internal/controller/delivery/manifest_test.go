package delivery

import (
	"strings"
	"testing"

	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
)

func TestDecodeManifest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		manifest string
		want     []string // kind/name
		err      string
	}{
		{name: "reference JSON sample", manifest: `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "example", "namespace": "default"}, "data": {"key": "value"}}`,
			want: []string{"ConfigMap/example"}},
		{name: "multi-document YAML with empty documents", manifest: "---\n" + configMapYAML("a", "", "1") + "---\n---\n" + serviceYAML("b"),
			want: []string{"ConfigMap/a", "Service/b"}},
		{name: "v1 List", manifest: `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}]}`,
			want: []string{"ConfigMap/x"}},
		{name: "malformed YAML", manifest: configMapYAML("a", "", "1") + "---\nkind: [oops\n", err: "document 2"},
		{name: "no name", manifest: "apiVersion: v1\nkind: ConfigMap\n", err: "without metadata.name"},
		{name: "no kind", manifest: "apiVersion: v1\nmetadata: {name: a}\n", err: "kind missing"},
		{name: "empty", manifest: "  \n", err: "no objects"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := manifests.Decode(tc.manifest)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range objs {
				got = append(got, o.GetKind()+"/"+o.GetName())
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("objects %v, want %v", got, tc.want)
			}
		})
	}
}
