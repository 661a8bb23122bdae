package discovery

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var testParams = Params{
	RegistryURL: "http://10.0.0.1:8082",
	ServerUUID:  "38947555-7742-3448-3784-823347823834",
	Token:       "0123456789abcdef0123456789abcdef0123456789abcdef",
	ProbeImage:  "ghcr.io/metalhub/metalprobe:v0.1.0",
}

// butane is the part of a Butane config the default template fills.
type butane struct {
	Variant string `json:"variant"`
	Version string `json:"version"`
	Systemd struct {
		Units []struct {
			Name     string `json:"name"`
			Enabled  bool   `json:"enabled"`
			Contents string `json:"contents"`
		} `json:"units"`
	} `json:"systemd"`
	Storage struct {
		Files []struct {
			Path     string `json:"path"`
			Mode     int    `json:"mode"`
			Contents struct {
				Inline string `json:"inline"`
			} `json:"contents"`
		} `json:"files"`
	} `json:"storage"`
}

func TestRenderDefaultIgnition(t *testing.T) {
	out, err := RenderIgnition(testParams, "")
	if err != nil {
		t.Fatal(err)
	}
	var b butane
	if err := yaml.Unmarshal(out, &b); err != nil {
		t.Fatalf("not YAML: %v\n%s", err, out)
	}
	if b.Variant != "fcos" || b.Version != "1.3.0" {
		t.Fatalf("variant %q version %q", b.Variant, b.Version)
	}
	if len(b.Systemd.Units) != 1 || b.Systemd.Units[0].Name != "metalprobe.service" || !b.Systemd.Units[0].Enabled {
		t.Fatalf("units %+v", b.Systemd.Units)
	}
	unit := b.Systemd.Units[0].Contents
	for _, want := range []string{
		"ExecStart=/usr/bin/podman run ", "--network host --privileged", testParams.ProbeImage,
		"--registry-url=" + testParams.RegistryURL, "--server-uuid=" + testParams.ServerUUID,
		"--token-file=" + ProbeTokenPath, "Restart=on-failure", "WantedBy=multi-user.target",
		// The probe's image has no pci.ids: the OS's is copied where the container sees it.
		"ExecStartPre=-/bin/sh -c 'cp /usr/share/hwdata/pci.ids /etc/metalprobe/pci.ids",
		"--volume /etc/metalprobe:/etc/metalprobe:ro",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("unit lacks %q:\n%s", want, unit)
		}
	}
	if strings.Contains(unit, testParams.Token) {
		t.Error("the token belongs in a file, not on the command line")
	}
	if len(b.Storage.Files) != 1 {
		t.Fatalf("files %+v", b.Storage.Files)
	}
	f := b.Storage.Files[0]
	// mode 0600 is YAML 1.1 octal, as Butane reads it.
	if f.Path != ProbeTokenPath || f.Contents.Inline != testParams.Token || f.Mode != 0o600 {
		t.Fatalf("token file %+v", f)
	}
}

func TestRenderCustomIgnition(t *testing.T) {
	tmpl := "variant: fcos\nversion: \"1.5.0\"\n# {{ .ServerUUID }}\nsystemd: {units: [{name: probe.service, contents: \"ExecStart=/probe --registry-url={{ .RegistryURL }} --token={{ .Token }}\"}]}\n"
	out, err := RenderIgnition(testParams, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "--registry-url=http://10.0.0.1:8082 --token="+testParams.Token) ||
		!strings.Contains(string(out), "# "+testParams.ServerUUID) {
		t.Fatalf("rendered:\n%s", out)
	}
}

func TestRenderIgnitionErrors(t *testing.T) {
	tests := []struct {
		name   string
		params func(*Params)
		tmpl   string
		want   string
	}{
		{"template syntax", nil, "{{ .Token ", "parsing ignition template"},
		{"unknown field", nil, "{{ .Password }}", "checking ignition template"},
		{"relative registry URL", func(p *Params) { p.RegistryURL = "registry:8082" }, "", "absolute http(s) URL"},
		{"URL that breaks the unit", func(p *Params) { p.RegistryURL = "http://r x" }, "", "registry URL"},
		{"missing UUID", func(p *Params) { p.ServerUUID = "" }, "", "server UUID"},
		{"YAML in the UUID", func(p *Params) { p.ServerUUID = "a\nstorage: {}" }, "", "server UUID"},
		{"token with a space", func(p *Params) { p.Token = "secret value" }, "", "token is empty or has"},
		{"missing image", func(p *Params) { p.ProbeImage = "" }, "", "probe image"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := testParams
			if tc.params != nil {
				tc.params(&p)
			}
			_, err := RenderIgnition(p, tc.tmpl)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "secret value") || strings.Contains(err.Error(), testParams.Token) {
				t.Fatal("token in error message")
			}
		})
	}
}

func TestParseIgnitionTemplateDefault(t *testing.T) {
	if _, err := ParseIgnitionTemplate("  "); err != nil {
		t.Fatal(err)
	}
}

// A cleaning round's ignition starts the same agent with --clean; a discovery round's does not.
// A custom template that drops the flag is told apart, so a fleet that cleans can refuse it.
func TestRenderCleaningIgnition(t *testing.T) {
	p := testParams
	p.CleaningPolicy = "AllDisks"
	out, err := RenderIgnition(p, "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "--token-file="+ProbeTokenPath+" --clean=AllDisks\n") {
		t.Fatalf("cleaning ignition lacks --clean:\n%s", out)
	}
	out, err = RenderIgnition(testParams, "")
	if err != nil || strings.Contains(string(out), "--clean") {
		t.Fatalf("discovery ignition: %v\n%s", err, out)
	}
	p.CleaningPolicy = "Shred; rm -rf /"
	if _, err := RenderIgnition(p, ""); err == nil {
		t.Fatal("an unknown cleaning policy was rendered")
	}
	def, err := ParseIgnitionTemplate("")
	if err != nil || !Cleans(def) {
		t.Fatalf("the default template does not clean: %v", err)
	}
	custom, err := ParseIgnitionTemplate(`{"ignition":{"version":"3.2.0"},"x":"--registry-url={{.RegistryURL}} --token={{.Token}}"}`)
	if err != nil || Cleans(custom) {
		t.Fatalf("a template without --clean is taken for one that cleans (%v)", err)
	}
}
